#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/support/sanitizer_slowdown.h"

namespace bm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A connected loopback socket, or -1. `receive_buffer` > 0 shrinks its receive buffer first, so
// that a response it does not read fills the server's send buffer soon.
int Connect(int port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (receive_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Everything `fd` receives until the server closes it; nothing if it is not closed within
// `limit`.
std::optional<std::string> ReadUntilClosed(int fd, milliseconds limit) {
  const Clock::time_point until = Clock::now() + limit;
  std::string received;
  while (Clock::now() < until) {
    pollfd readable{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (::poll(&readable, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) != 1) break;
    char buffer[4096];
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) return received;
    received.append(buffer, static_cast<size_t>(got));
  }
  return std::nullopt;
}

// How long GET `path` took to answer 200, or nothing if it did not within `limit`.
std::optional<milliseconds> TimedGet(int port, const std::string& path, milliseconds limit) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(limit);
  client.set_read_timeout(limit);
  client.set_write_timeout(limit);
  const Clock::time_point start = Clock::now();
  httplib::Result result = client.Get(path);
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  if (!result || result->status != 200 || took > limit) return std::nullopt;
  return took;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

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

// Clients that ask for a large page and read one byte of it a second: a server that writes
// responses from its handler threads has every thread stuck in send() and answers nothing else.
TEST(HttpServerTest, HealthzAnswersWhileClientsReadTheirResponsesOneByteASecond) {
  constexpr int kSlowReaders = 6;
  HttpServer server;
  server.AddRoute("/big", [](const HttpRequest&) {
    return HttpResponse::Text(200, std::string(size_t{8} << 20, 'x'));  // beyond socket buffers
  });
  server.AddRoute("/healthz", [](const HttpRequest&) { return HttpResponse::Text(200, "ok\n"); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());

  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;
  std::vector<std::thread> readers;
  for (int i = 0; i < kSlowReaders; ++i) {
    const int fd = Connect(server.port(), /*receive_buffer=*/4096);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
    readers.emplace_back([&, fd] {
      std::unique_lock<std::mutex> lock(mutex);
      do {
        char byte;
        (void)::recv(fd, &byte, 1, MSG_DONTWAIT);
      } while (!done_changed.wait_for(lock, std::chrono::seconds(1), [&] { return done; }));
      ::close(fd);
    });
  }
  // Probed for three seconds while the slow readers hold their responses.
  const Clock::time_point until = Clock::now() + std::chrono::seconds(3);
  std::optional<milliseconds> worst = milliseconds(0);
  do {
    std::optional<milliseconds> took =
        TimedGet(server.port(), "/healthz", milliseconds(1000) * testing::kSanitizerSlowdown);
    worst = took ? std::max(*worst, *took) : took;
  } while (worst && Clock::now() < until);
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  done_changed.notify_all();
  for (std::thread& reader : readers) reader.join();
  EXPECT_TRUE(worst) << "/healthz did not answer within " << testing::kSanitizerSlowdown
                     << " s while " << kSlowReaders
                     << " clients read their responses one byte a second";
}

TEST(HttpServerTest, ANewConnectionOverThePeersLimitClosesTheOneThatWaitedLongest) {
  HttpServerOptions options;
  options.max_connections_per_peer = 8;
  HttpServer server(options);
  server.AddRoute("/healthz", [](const HttpRequest&) { return HttpResponse::Text(200, "ok\n"); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  std::vector<int> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(Connect(server.port()));
    ASSERT_GE(slow.back(), 0);
    ASSERT_TRUE(SendAll(slow.back(), "GET /healthz HTTP/1.1\r\nHost: x\r\n"));
  }
  // The prober gets in (and makes room by closing one more).
  EXPECT_TRUE(
      TimedGet(server.port(), "/healthz", milliseconds(1000) * testing::kSanitizerSlowdown));
  // The oldest 13 were closed, the newest 7 still wait.
  for (int i = 0; i < 20; ++i) {
    pollfd readable{slow[i], POLLIN, 0};
    if (i < 13) {
      EXPECT_TRUE(ReadUntilClosed(slow[i], milliseconds(5000))) << "connection " << i;
    } else {
      EXPECT_EQ(::poll(&readable, 1, 0), 0) << "connection " << i;
    }
    ::close(slow[i]);
  }
}

TEST(HttpServerTest, ARequestThatDoesNotArriveWithinItsDeadlineIsCutOff) {
  HttpServerOptions options;
  options.request_deadline = milliseconds(300);
  HttpServer server(options);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\n"));
  std::optional<std::string> received = ReadUntilClosed(fd, milliseconds(5000));
  EXPECT_TRUE(received);
  EXPECT_GE(Clock::now() - start, milliseconds(250));
  ::close(fd);
}

TEST(HttpServerTest, PipelinedRequestsAreAnsweredInOrderUpToTheKeepAliveMaximum) {
  HttpServerOptions options;
  options.keep_alive_max_requests = 3;
  HttpServer server(options);
  server.AddRoute("/n/(\\d+)", [](const HttpRequest& request) {
    return HttpResponse::Text(200, "n=" + request.captures.at(0) + "\n");
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  std::string requests;
  for (int i = 1; i <= 4; ++i) requests += "GET /n/" + std::to_string(i) + " HTTP/1.1\r\n\r\n";
  ASSERT_TRUE(SendAll(fd, requests));
  std::optional<std::string> received = ReadUntilClosed(fd, milliseconds(5000));
  ASSERT_TRUE(received);
  EXPECT_EQ(Count(*received, "HTTP/1.1 200 OK"), 3u) << *received;
  EXPECT_LT(received->find("n=1"), received->find("n=2"));
  EXPECT_LT(received->find("n=2"), received->find("n=3"));
  EXPECT_EQ(received->find("n=4"), std::string::npos);
  EXPECT_EQ(Count(*received, "Connection: close"), 1u);
  ::close(fd);
}

TEST(HttpServerTest, AClientThatShutsItsSideAfterItsRequestStillGetsTheAnswer) {
  HttpServer server;
  server.AddRoute("/ok", [](const HttpRequest&) { return HttpResponse::Text(200, "body"); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int fd = Connect(server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, "GET /ok HTTP/1.0\r\n\r\n"));
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  std::optional<std::string> received = ReadUntilClosed(fd, milliseconds(5000));
  ASSERT_TRUE(received);
  EXPECT_EQ(received->rfind("HTTP/1.1 200 OK", 0), 0u) << *received;
  EXPECT_NE(received->find("\r\n\r\nbody"), std::string::npos) << *received;
  ::close(fd);
}

TEST(HttpServerTest, HeadGetsHeadersOnlyAndOtherMethodsAreRefused) {
  HttpServer server;
  server.AddRoute("/ok", [](const HttpRequest&) { return HttpResponse::Text(200, "body"); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  httplib::Client client("127.0.0.1", server.port());
  httplib::Result head = client.Head("/ok");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->get_header_value("Content-Length"), "4");
  EXPECT_TRUE(head->body.empty());
  httplib::Result post = client.Post("/ok", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

}  // namespace
}  // namespace bm
