#include "common/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <charconv>

namespace bm {
namespace {

// Status pages are read by people and scrapers; a client that sends or reads nothing for this
// long gives its pool thread back.
constexpr time_t kIoTimeoutSeconds = 5;
constexpr time_t kIdleKeepAliveSeconds = 5;
// Requests served at once; status traffic is light and must not compete with the event loop.
constexpr size_t kPoolThreads = 4;

}  // namespace

std::string HttpRequest::Param(const std::string& name, const std::string& fallback) const {
  auto it = params.find(name);
  return it == params.end() ? fallback : it->second;
}

HttpResponse HttpResponse::Text(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body), {}};
}

HttpResponse HttpResponse::Json(int status, std::string body) {
  return HttpResponse{status, "application/json", std::move(body), {}};
}

HttpResponse HttpResponse::Html(std::string body) {
  return HttpResponse{200, "text/html; charset=utf-8", std::move(body), {}};
}

Result<std::pair<std::string, int>> ParseHostPort(std::string_view host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("'" + std::string(host_port) + "' is not HOST:PORT");
  }
  std::string host(host_port.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view port_text = host_port.substr(colon + 1);
  int port = -1;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return InvalidArgumentError("'" + std::string(port_text) + "' in '" + std::string(host_port) +
                                "' is not a port number (0-65535)");
  }
  return std::make_pair(std::move(host), port);
}

HttpServer::HttpServer() : server_(std::make_unique<httplib::Server>()) {
  server_->set_read_timeout(kIoTimeoutSeconds, 0);
  server_->set_write_timeout(kIoTimeoutSeconds, 0);
  server_->set_keep_alive_timeout(kIdleKeepAliveSeconds);
  server_->set_payload_max_length(64 * 1024);  // GETs only: nothing big is ever uploaded
  server_->new_task_queue = [] { return new httplib::ThreadPool(kPoolThreads); };
  // cpp-httplib's default adds SO_REUSEPORT, which would let a second server bind the same port
  // and take half its requests; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddRoute(const std::string& pattern, Handler handler) {
  server_->Get(
      pattern, [handler = std::move(handler)](const httplib::Request& in, httplib::Response& out) {
        HttpRequest request;
        request.path = in.path;
        for (size_t i = 1; i < in.matches.size(); ++i) request.captures.push_back(in.matches[i]);
        for (const auto& [key, value] : in.params) request.params.emplace(key, value);
        HttpResponse response;
        try {
          response = handler(request);
        } catch (const std::exception& e) {
          // A bug in a page must not take the server down; say so to the caller and the log.
          spdlog::error("http {}: {}", in.path, e.what());
          response = HttpResponse::Text(500, std::string("internal error: ") + e.what() + "\n");
        }
        out.status = response.status;
        out.set_header("Cache-Control", "no-store");
        for (const auto& [name, value] : response.headers) out.set_header(name.c_str(), value);
        out.set_content(std::move(response.body), response.content_type.c_str());
      });
}

Status HttpServer::Start(std::string_view host_port) {
  BM_ASSIGN_OR_RETURN(auto address, ParseHostPort(host_port));
  const auto& [host, port] = address;
  if (port == 0) {
    port_ = server_->bind_to_any_port(host.c_str());
  } else {
    port_ = server_->bind_to_port(host.c_str(), port) ? port : -1;
  }
  if (port_ <= 0) {
    port_ = 0;
    return UnavailableError("cannot serve HTTP on '" + std::string(host_port) +
                            "': address in use or not local");
  }
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    listen_returned_.store(true);
  });
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  // stop() is a no-op until the listening thread is inside its accept loop.
  while (!server_->is_running() && !listen_returned_.load()) std::this_thread::yield();
  server_->stop();
  thread_.join();
}

}  // namespace bm
