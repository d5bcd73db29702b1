#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <regex>
#include <thread>
#include <unordered_map>

#include "common/core/mutex.h"
#include "common/core/refusal_log.h"
#include "common/http/http_request_parser.h"

namespace bm {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxBodyBytes = 64 * 1024;  // GETs only: nothing big is ever uploaded
constexpr size_t kReadChunk = 16 * 1024;
constexpr int kMaxAcceptsPerWake = 64;
// Out of descriptors, accepting waits this long rather than spinning on the listening socket.
constexpr std::chrono::milliseconds kAcceptPause{100};
constexpr std::chrono::milliseconds kMaxPollWait{1000};

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Status";
  }
}

// The bytes of `response` on the wire. `head_only` answers a HEAD request (no body); `close`
// says the connection closes after it, else how long it may idle and how many more requests it
// may make.
std::string Serialize(const HttpResponse& response, bool head_only, bool close,
                      std::chrono::milliseconds idle, size_t requests_left) {
  std::string bytes =
      "HTTP/1.1 " + std::to_string(response.status) + " " + ReasonPhrase(response.status) + "\r\n";
  bytes += "Content-Type: " + response.content_type + "\r\n";
  bytes += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
  for (const auto& [name, value] : response.headers) bytes += name + ": " + value + "\r\n";
  if (close) {
    bytes += "Connection: close\r\n";
  } else {
    const auto seconds =
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(idle).count());
    bytes += "Connection: keep-alive\r\nKeep-Alive: timeout=" + std::to_string(seconds) +
             ", max=" + std::to_string(requests_left) + "\r\n";
  }
  bytes += "\r\n";
  if (!head_only) bytes += response.body;
  return bytes;
}

// Threads that run jobs in the order they were posted. Jobs still queued when it is destroyed
// are dropped; running ones finish first. Thread-safe.
class HandlerPool {
 public:
  explicit HandlerPool(size_t threads) {
    for (size_t i = 0; i < std::max<size_t>(threads, 1); ++i) {
      threads_.emplace_back([this] { Run(); });
    }
  }
  ~HandlerPool() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
      jobs_.clear();
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  void Post(std::function<void()> job) {
    {
      MutexLock lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> job;
      {
        MutexLock lock(mutex_);
        while (!stopping_ && jobs_.empty()) lock.Wait(wake_);
        if (stopping_) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_ BM_GUARDED_BY(mutex_);
  bool stopping_ BM_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

// The address of a connection's peer without its port: what the per-peer limit counts.
std::string PeerOf(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    return std::string(reinterpret_cast<const char*>(&in.sin_addr), sizeof(in.sin_addr));
  }
  if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    return std::string(reinterpret_cast<const char*>(&in6.sin6_addr), sizeof(in6.sin6_addr));
  }
  return {};
}

std::string PrintablePeer(const std::string& peer) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (peer.size() == 4) inet_ntop(AF_INET, peer.data(), text, sizeof(text));
  if (peer.size() == 16) inet_ntop(AF_INET6, peer.data(), text, sizeof(text));
  return text;
}

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

// The server's state. The I/O thread (Run) owns the listening socket, every connection and the
// per-peer counts; handler threads only call Complete(), which hands a response back through
// completions_ and wakes the I/O thread.
//
// A connection's states: reading (waiting for a request, within request_deadline) -> handling
// (its handler runs on a pool; nothing is read meanwhile) -> writing (within
// response_deadline) -> reading again, or closed. Only reading connections are evicted to make
// room for new ones: they cost the server nothing to drop.
class HttpServer::Impl {
 public:
  explicit Impl(HttpServerOptions options) : options_(options) {}
  ~Impl() { Stop(); }

  void AddRoute(const std::string& pattern, Handler handler, bool probe) {
    routes_.push_back(Route{std::regex(pattern), std::move(handler), probe});
  }
  // Binds and starts serving; returns the bound port.
  Result<int> Start(const std::string& host, int port);
  void Stop();

 private:
  struct Route {
    std::regex pattern;
    Handler handler;
    bool probe = false;
  };
  enum class State { kReading, kHandling, kWriting };
  struct Connection {
    int fd = -1;
    std::string peer;
    State state = State::kReading;
    std::string in;   // received and not yet parsed
    std::string out;  // the response being written
    size_t written = 0;
    SteadyClock::time_point since;  // when it began waiting for its request, or writing
    size_t requests = 0;            // requests it has made
    bool close_after_write = false;
    bool peer_done = false;  // the peer shut its side: answer what it asked, then close
  };
  struct Completion {
    uint64_t id;
    std::string bytes;
    bool close;
  };

  void Run();
  void AcceptAll();
  bool MakeRoomFor(const std::string& peer);
  // These return false when the connection must be closed.
  bool ReadFrom(Connection& connection);
  bool TryRequest(uint64_t id, Connection& connection);
  bool Respond(uint64_t id, Connection& connection, std::string bytes, bool close);
  bool WriteTo(uint64_t id, Connection& connection);
  void Dispatch(uint64_t id, Connection& connection, HttpRequestHead head);
  void TakeCompletions();
  void ExpireDeadlines(SteadyClock::time_point now);
  std::chrono::milliseconds UntilNextDeadline(SteadyClock::time_point now) const;
  void Close(uint64_t id);
  // Any thread: the response to connection `id` is ready.
  void Complete(uint64_t id, std::string bytes, bool close);

  // Constant once Start() returns.
  const HttpServerOptions options_;
  std::vector<Route> routes_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;

  // Owned by the I/O thread.
  std::unordered_map<uint64_t, Connection> connections_;
  std::unordered_map<std::string, size_t> per_peer_;
  uint64_t next_id_ = 1;
  SteadyClock::time_point accept_paused_until_{};
  RefusalLog refusals_;

  Mutex completions_mutex_;
  std::vector<Completion> completions_ BM_GUARDED_BY(completions_mutex_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Destroyed (joined) before the members their jobs use.
  std::unique_ptr<HandlerPool> pages_;
  std::unique_ptr<HandlerPool> probes_;
};

Result<int> HttpServer::Impl::Start(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0) {
    return UnavailableError("cannot resolve '" + host + "'");
  }
  for (addrinfo* address = found; address != nullptr && listen_fd_ < 0;
       address = address->ai_next) {
    const int fd =
        ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR for a quick restart; not SO_REUSEPORT, which would let a second server bind
    // the same port and take half its requests.
    int yes = 1;
    int no = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (address->ai_family == AF_INET6) {
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
    }
    if (::bind(fd, address->ai_addr, address->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) return UnavailableError("cannot bind");
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                        : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return InternalError(std::string("eventfd: ") + std::strerror(errno));
  pages_ = std::make_unique<HandlerPool>(options_.page_threads);
  probes_ = std::make_unique<HandlerPool>(options_.probe_threads);
  thread_ = std::thread([this] { Run(); });
  return bound_port;
}

void HttpServer::Impl::Stop() {
  if (thread_.joinable()) {
    stop_.store(true);
    const uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  pages_.reset();
  probes_.reset();
  for (auto& [id, connection] : connections_) ::close(connection.fd);
  connections_.clear();
  per_peer_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void HttpServer::Impl::Run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // of fds[2...]
  while (!stop_.load()) {
    SteadyClock::time_point now = SteadyClock::now();
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({now >= accept_paused_until_ ? listen_fd_ : -1, POLLIN, 0});
    for (const auto& [id, connection] : connections_) {
      const short events = connection.state == State::kReading   ? POLLIN
                           : connection.state == State::kWriting ? POLLOUT
                                                                 : 0;
      fds.push_back({connection.fd, events, 0});
      ids.push_back(id);
    }
    const std::chrono::milliseconds wait =
        now < accept_paused_until_
            ? std::min(UntilNextDeadline(now),
                       std::chrono::ceil<std::chrono::milliseconds>(accept_paused_until_ - now))
            : UntilNextDeadline(now);
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) < 0 && errno != EINTR) {
      spdlog::error("http: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) TakeCompletions();
    if (fds[1].revents != 0) AcceptAll();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto found = connections_.find(ids[i - 2]);
      if (found == connections_.end()) continue;  // evicted to make room meanwhile
      Connection& connection = found->second;
      bool open = true;
      if (connection.state == State::kReading) {
        open = ReadFrom(connection) && TryRequest(found->first, connection) &&
               !(connection.peer_done && connection.state == State::kReading);
      } else if (connection.state == State::kWriting) {
        open = WriteTo(found->first, connection);
      } else if ((fds[i].revents & (POLLERR | POLLHUP)) != 0) {
        open = false;  // the response it waits for has nowhere to go
      }
      if (!open) Close(found->first);
    }
    ExpireDeadlines(SteadyClock::now());
  }
}

void HttpServer::Impl::AcceptAll() {
  for (int i = 0; i < kMaxAcceptsPerWake; ++i) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        refusals_.Warn(std::string("http: cannot accept a connection: ") + std::strerror(errno));
        accept_paused_until_ = SteadyClock::now() + kAcceptPause;
      }
      return;  // EAGAIN: none left; anything else concerned that one connection only
    }
    const std::string peer = PeerOf(address);
    if (!MakeRoomFor(peer)) {
      refusals_.Warn("http: refused a connection from " + PrintablePeer(peer) +
                     ": every connection is busy with a request");
      ::close(fd);
      continue;
    }
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    Connection& connection = connections_[next_id_++];
    connection.fd = fd;
    connection.peer = peer;
    connection.since = SteadyClock::now();
    ++per_peer_[peer];
  }
}

bool HttpServer::Impl::MakeRoomFor(const std::string& peer) {
  const bool peer_full = per_peer_[peer] >= options_.max_connections_per_peer;
  if (!peer_full && connections_.size() < options_.max_connections) return true;
  auto victim = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->second.state != State::kReading || (peer_full && it->second.peer != peer)) continue;
    if (victim == connections_.end() || it->second.since < victim->second.since) victim = it;
  }
  if (victim == connections_.end()) return false;
  refusals_.Warn("http: closed a connection from " + PrintablePeer(victim->second.peer) +
                 " that waited longest for its request, to make room (" +
                 (peer_full ? "its peer holds the most connections one peer may"
                            : "the server holds the most connections it may") +
                 ")");
  Close(victim->first);
  return true;
}

bool HttpServer::Impl::ReadFrom(Connection& connection) {
  // A request's head and body are all it may send before its answer; more is not read yet.
  while (connection.in.size() < kMaxHttpHeadBytes + kMaxBodyBytes) {
    char buffer[kReadChunk];
    const ssize_t got = ::recv(connection.fd, buffer, sizeof(buffer), 0);
    if (got > 0) {
      connection.in.append(buffer, static_cast<size_t>(got));
      continue;
    }
    if (got == 0) {
      connection.peer_done = true;  // a request it sent before still gets its answer
      return true;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
  return true;
}

bool HttpServer::Impl::TryRequest(uint64_t id, Connection& connection) {
  ParsedHttpHead parsed = ParseHttpRequestHead(connection.in);
  if (parsed.outcome == ParsedHttpHead::Outcome::kIncomplete) return true;
  if (parsed.outcome == ParsedHttpHead::Outcome::kBad) {
    return Respond(
        id, connection,
        Serialize(HttpResponse::Text(parsed.status, parsed.error + "\n"), false, true, {}, 0),
        true);
  }
  if (parsed.head.content_length > kMaxBodyBytes) {
    return Respond(
        id, connection,
        Serialize(HttpResponse::Text(413, "request body too large\n"), false, true, {}, 0), true);
  }
  if (connection.in.size() < parsed.size + parsed.head.content_length) return true;
  connection.in.erase(0, parsed.size + parsed.head.content_length);  // a GET's body is unused
  Dispatch(id, connection, std::move(parsed.head));
  return true;
}

void HttpServer::Impl::Dispatch(uint64_t id, Connection& connection, HttpRequestHead head) {
  ++connection.requests;
  connection.state = State::kHandling;
  const bool close = !head.keep_alive || connection.peer_done ||
                     connection.requests >= options_.keep_alive_max_requests;
  const size_t requests_left = options_.keep_alive_max_requests - connection.requests;
  const bool head_only = head.method == "HEAD";
  auto answer = [this, id, head_only, close, requests_left](const HttpResponse& response) {
    Complete(id, Serialize(response, head_only, close, options_.request_deadline, requests_left),
             close);
  };
  if (head.method != "GET" && !head_only) {
    HttpResponse refused = HttpResponse::Text(405, "only GET and HEAD are served\n");
    refused.headers.emplace_back("Allow", "GET, HEAD");
    answer(refused);
    return;
  }
  for (const Route& route : routes_) {
    std::smatch match;
    if (!std::regex_match(head.path, match, route.pattern)) continue;
    HttpRequest request;
    request.path = head.path;
    for (size_t i = 1; i < match.size(); ++i) request.captures.push_back(match[i]);
    request.params = std::move(head.params);
    HandlerPool& pool = route.probe ? *probes_ : *pages_;
    pool.Post([&route, request = std::move(request), answer = std::move(answer)] {
      HttpResponse response;
      try {
        response = route.handler(request);
      } catch (const std::exception& e) {
        // A bug in a page must not take the server down; say so to the caller and the log.
        spdlog::error("http {}: {}", request.path, e.what());
        response = HttpResponse::Text(500, std::string("internal error: ") + e.what() + "\n");
      }
      response.headers.emplace_back("Cache-Control", "no-store");
      answer(response);
    });
    return;
  }
  answer(HttpResponse::Text(404, "not found: " + head.path + "\n"));
}

void HttpServer::Impl::Complete(uint64_t id, std::string bytes, bool close) {
  {
    MutexLock lock(completions_mutex_);
    completions_.push_back(Completion{id, std::move(bytes), close});
  }
  const uint64_t one = 1;
  (void)::write(wake_fd_, &one, sizeof(one));
}

void HttpServer::Impl::TakeCompletions() {
  uint64_t count = 0;
  (void)::read(wake_fd_, &count, sizeof(count));
  std::vector<Completion> completions;
  {
    MutexLock lock(completions_mutex_);
    completions.swap(completions_);
  }
  for (Completion& completion : completions) {
    auto found = connections_.find(completion.id);
    if (found == connections_.end()) continue;  // closed while its handler ran
    if (!Respond(completion.id, found->second, std::move(completion.bytes), completion.close)) {
      Close(completion.id);
    }
  }
}

bool HttpServer::Impl::Respond(uint64_t id, Connection& connection, std::string bytes, bool close) {
  connection.state = State::kWriting;
  connection.out = std::move(bytes);
  connection.written = 0;
  connection.since = SteadyClock::now();
  connection.close_after_write = close;
  return WriteTo(id, connection);
}

bool HttpServer::Impl::WriteTo(uint64_t id, Connection& connection) {
  while (connection.written < connection.out.size()) {
    const ssize_t sent = ::send(connection.fd, connection.out.data() + connection.written,
                                connection.out.size() - connection.written, MSG_NOSIGNAL);
    if (sent > 0) {
      connection.written += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    return false;
  }
  if (connection.close_after_write) return false;
  connection.state = State::kReading;
  connection.out = std::string();
  connection.since = SteadyClock::now();
  // A pipelined request may be waiting in the buffer already. Bounded: a connection makes at
  // most keep_alive_max_requests requests.
  return TryRequest(id, connection);
}

std::chrono::milliseconds HttpServer::Impl::UntilNextDeadline(SteadyClock::time_point now) const {
  SteadyClock::time_point next = now + kMaxPollWait;
  for (const auto& [id, connection] : connections_) {
    if (connection.state == State::kReading) {
      next = std::min(next, connection.since + options_.request_deadline);
    } else if (connection.state == State::kWriting) {
      next = std::min(next, connection.since + options_.response_deadline);
    }
  }
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(next - now));
}

void HttpServer::Impl::ExpireDeadlines(SteadyClock::time_point now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, connection] : connections_) {
    if ((connection.state == State::kReading &&
         now - connection.since >= options_.request_deadline) ||
        (connection.state == State::kWriting &&
         now - connection.since >= options_.response_deadline)) {
      expired.push_back(id);
    }
  }
  for (uint64_t id : expired) Close(id);
}

void HttpServer::Impl::Close(uint64_t id) {
  auto found = connections_.find(id);
  if (found == connections_.end()) return;
  ::close(found->second.fd);
  auto peer = per_peer_.find(found->second.peer);
  if (peer != per_peer_.end() && --peer->second == 0) per_peer_.erase(peer);
  connections_.erase(found);
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddRoute(const std::string& pattern, Handler handler) {
  impl_->AddRoute(pattern, std::move(handler), /*probe=*/false);
}

void HttpServer::AddProbeRoute(const std::string& pattern, Handler handler) {
  impl_->AddRoute(pattern, std::move(handler), /*probe=*/true);
}

Status HttpServer::Start(std::string_view host_port) {
  BM_ASSIGN_OR_RETURN(auto address, ParseHostPort(host_port));
  const auto& [host, port] = address;
  Result<int> bound = impl_->Start(host, port);
  if (!bound.ok()) {
    return UnavailableError("cannot serve HTTP on '" + std::string(host_port) +
                            "': address in use or not local");
  }
  port_ = *bound;
  return Status::Ok();
}

void HttpServer::Stop() { impl_->Stop(); }

}  // namespace bm
