#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace bm {

// A GET request as a handler sees it.
struct HttpRequest {
  std::string path;
  // Captures of the route's pattern, e.g. {"7"} for "/api/v1/rdds/(\d+)" and "/api/v1/rdds/7".
  std::vector<std::string> captures;
  std::multimap<std::string, std::string> params;  // decoded query parameters

  // The first value of a query parameter, or `fallback`.
  std::string Param(const std::string& name, const std::string& fallback = "") const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers{};  // more response headers

  static HttpResponse Text(int status, std::string body);
  static HttpResponse Json(int status, std::string body);
  static HttpResponse Html(std::string body);
};

// A small HTTP/1.1 server for status pages, REST and metrics (cpp-httplib underneath). It only
// serves GET routes added before Start(). Requests run on the library's small thread pool, never
// on a server's event loop; handlers must therefore only read thread-safe state (a published
// snapshot, or a query posted to the loop with a deadline). Slow or idle clients are cut off by
// read/write timeouts, so they hold a pool thread for seconds at most.
//
// Thread-safety: AddRoute before Start(), from one thread; Stop() from any thread.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer();
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `pattern` is a regular expression over the whole path (ECMAScript syntax).
  void AddRoute(const std::string& pattern, Handler handler);

  // Binds "HOST:PORT" (PORT 0 = any free port; see port()) and serves on a background thread.
  // kInvalidArgument for a malformed address, kUnavailable when it cannot be bound.
  Status Start(std::string_view host_port);
  void Stop();

  // The bound port, once started.
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  int port_ = 0;
};

// Splits "HOST:PORT" (IPv6 as "[::1]:PORT"). kInvalidArgument naming what is wrong.
Result<std::pair<std::string, int>> ParseHostPort(std::string_view host_port);

}  // namespace bm
