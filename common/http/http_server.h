#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/status.h"

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

// How much an HttpServer lets its clients hold. Slow or idle clients cost a descriptor and a
// buffer, never a thread; these bound how many there may be and how long they may take.
struct HttpServerOptions {
  // Connections open at once, in all and from one peer address. A new connection beyond
  // either evicts the connection (of that peer, or of any) that has waited longest for its
  // request, so a prober always gets in; it is refused only when none is waiting.
  size_t max_connections = 512;
  size_t max_connections_per_peer = 128;
  // A request's head and body must have arrived this long after the connection began waiting
  // for it (after accepting it, or after the previous response): idle keep-alive included.
  std::chrono::milliseconds request_deadline{5000};
  // A response must have been written this long after it was ready.
  std::chrono::milliseconds response_deadline{20000};
  // Requests one connection may make before the server closes it.
  size_t keep_alive_max_requests = 100;
  // Threads that run the handlers of page routes, and of probe routes (AddProbeRoute).
  size_t page_threads = 3;
  size_t probe_threads = 1;
};

// A small HTTP/1.1 server for status pages, REST and metrics. It serves GET (and HEAD) routes
// added before Start(). One I/O thread owns the listening socket and every connection: it reads
// requests and writes responses without blocking, so a client that sends or reads slowly holds
// nothing but its own connection, within the deadlines and limits of HttpServerOptions.
// Handlers run on small thread pools, never on a server's event loop and never on the I/O
// thread: probes (/healthz, /readyz) on their own, so pages that wait for a busy event loop do
// not delay them. Handlers must only read thread-safe state (a published snapshot, or a query
// posted to the loop with a deadline), and must return within a bounded time.
//
// Thread-safety: AddRoute and AddProbeRoute before Start(), from one thread; Stop() from any
// thread.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `pattern` is a regular expression over the whole path (ECMAScript syntax).
  void AddRoute(const std::string& pattern, Handler handler);
  // As AddRoute, for a probe: its handler runs on the probe threads.
  void AddProbeRoute(const std::string& pattern, Handler handler);

  // Binds "HOST:PORT" (PORT 0 = any free port; see port()) and serves on a background thread.
  // kInvalidArgument for a malformed address, kUnavailable when it cannot be bound.
  Status Start(std::string_view host_port);
  void Stop();

  // The bound port, once started.
  int port() const { return port_; }

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// Splits "HOST:PORT" (IPv6 as "[::1]:PORT"). kInvalidArgument naming what is wrong.
Result<std::pair<std::string, int>> ParseHostPort(std::string_view host_port);

}  // namespace bm
