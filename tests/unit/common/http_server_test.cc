#include "common/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace bm {
namespace {

TEST(HttpServerTest, ServesRoutesWithCapturesAndParamsOnAnyFreePort) {
  HttpServer server;
  server.AddRoute(R"(/items/(\d+))", [](const HttpRequest& request) {
    return HttpResponse::Json(200, "{\"id\":" + request.captures.at(0) + ",\"q\":\"" +
                                       request.Param("q", "none") + "\"}");
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ASSERT_GT(server.port(), 0);
  httplib::Client client("127.0.0.1", server.port());
  httplib::Result found = client.Get("/items/42?q=a%20b");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->status, 200);
  EXPECT_EQ(found->body, "{\"id\":42,\"q\":\"a b\"}");
  EXPECT_EQ(found->get_header_value("Content-Type"), "application/json");
  httplib::Result missing = client.Get("/items/x");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  server.Stop();
  server.Stop();  // idempotent
}

TEST(HttpServerTest, AHandlerThatThrowsAnswers500AndTheServerGoesOn) {
  HttpServer server;
  server.AddRoute(
      "/boom", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("broken page"); });
  server.AddRoute("/ok", [](const HttpRequest&) { return HttpResponse::Text(200, "ok"); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client client("127.0.0.1", server.port());
  httplib::Result boom = client.Get("/boom");
  ASSERT_TRUE(boom);
  EXPECT_EQ(boom->status, 500);
  httplib::Result ok = client.Get("/ok");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServerTest, BadAddressesAreRejectedClearly) {
  EXPECT_EQ(ParseHostPort("localhost").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("host:http").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("host:70000").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHostPort("[::1]:80").value(), std::make_pair(std::string("::1"), 80));
  HttpServer server;
  EXPECT_EQ(server.Start("nonsense").code(), StatusCode::kInvalidArgument);
}

TEST(HttpServerTest, ATakenPortIsUnavailable) {
  HttpServer first;
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  HttpServer second;
  EXPECT_EQ(second.Start("127.0.0.1:" + std::to_string(first.port())).code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace bm
