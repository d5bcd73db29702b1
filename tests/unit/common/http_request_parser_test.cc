#include "common/http/http_request_parser.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

using Outcome = ParsedHttpHead::Outcome;

TEST(HttpRequestParserTest, WaitsForTheEndOfTheHead) {
  EXPECT_EQ(ParseHttpRequestHead("GET /metrics HTTP/1.1\r\nHost: x\r\n").outcome,
            Outcome::kIncomplete);
  EXPECT_EQ(ParseHttpRequestHead("").outcome, Outcome::kIncomplete);
}

TEST(HttpRequestParserTest, ReadsPathParamsAndLengthAndStopsAtTheHeadsEnd) {
  const std::string head =
      "GET /items/a%2Fb?q=a%20b&x=1+2&flag HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n";
  ParsedHttpHead parsed = ParseHttpRequestHead(head + "abcGET / HTTP/1.1\r\n");
  ASSERT_EQ(parsed.outcome, Outcome::kComplete) << parsed.error;
  EXPECT_EQ(parsed.size, head.size());
  EXPECT_EQ(parsed.head.method, "GET");
  EXPECT_EQ(parsed.head.path, "/items/a/b");
  EXPECT_EQ(parsed.head.params.find("q")->second, "a b");
  EXPECT_EQ(parsed.head.params.find("x")->second, "1 2");
  EXPECT_EQ(parsed.head.params.find("flag")->second, "");
  EXPECT_EQ(parsed.head.content_length, 3u);
  EXPECT_TRUE(parsed.head.keep_alive);
}

TEST(HttpRequestParserTest, KeepAliveFollowsTheVersionAndTheConnectionHeader) {
  EXPECT_FALSE(ParseHttpRequestHead("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(ParseHttpRequestHead("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
  EXPECT_TRUE(
      ParseHttpRequestHead("GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n").head.keep_alive);
}

TEST(HttpRequestParserTest, MalformedOrOversizedHeadsAreRefusedWithTheirStatus) {
  EXPECT_EQ(ParseHttpRequestHead("GARBAGE\r\n\r\n").status, 400);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/2.0\r\n\r\n").status, 505);
  EXPECT_EQ(ParseHttpRequestHead("GET http://x/ HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\r\nno colon\r\n\r\n").status, 400);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").status, 400);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .status,
            400);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").status,
            501);
  // Too large, whether or not the head has ended.
  const std::string endless = "GET / HTTP/1.1\r\nX: " + std::string(kMaxHttpHeadBytes, 'a');
  EXPECT_EQ(ParseHttpRequestHead(endless).status, 431);
  EXPECT_EQ(ParseHttpRequestHead(endless + "\r\n\r\n").status, 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 200; ++i) many += "X: y\r\n";
  EXPECT_EQ(ParseHttpRequestHead(many + "\r\n").status, 431);
}

TEST(HttpRequestParserTest, DecodesEscapesAndKeepsBrokenOnes) {
  EXPECT_EQ(DecodeUrl("a%20b+c", false), "a b+c");
  EXPECT_EQ(DecodeUrl("a%20b+c", true), "a b c");
  EXPECT_EQ(DecodeUrl("100%", true), "100%");
  EXPECT_EQ(DecodeUrl("%zz%4", true), "%zz%4");
}

}  // namespace
}  // namespace bm
