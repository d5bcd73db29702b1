#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace bm::testing {
namespace {

int ConnectLoopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::listen(listen_fd_, 16);
  socklen_t length = sizeof(address);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  thread_ = std::thread([this] { Run(); });
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  thread_.join();
  ::close(listen_fd_);
}

std::string TcpProxy::Captured() const {
  std::lock_guard lock(mutex_);
  std::string joined;
  for (const std::string& read : captured_) joined += read;
  return joined;
}

void TcpProxy::CorruptOnce(std::string pattern) {
  std::lock_guard lock(mutex_);
  corrupt_pattern_ = std::move(pattern);
  corrupt_side_ = 0;
}

void TcpProxy::CorruptReplyOnce(std::string pattern) {
  std::lock_guard lock(mutex_);
  corrupt_pattern_ = std::move(pattern);
  corrupt_side_ = 1;
}

bool TcpProxy::corrupted() const {
  std::lock_guard lock(mutex_);
  return corrupted_;
}

void TcpProxy::LimitRate(uint64_t bytes_per_second) { rate_limit_.store(bytes_per_second); }

// One relayed connection: the client's socket (side 0) and the target's (side 1). Each direction
// has its own pending bytes, so a receiver that stops reading holds back only the bytes going
// to it: as on a real link, the other direction (a heartbeat, an acknowledgement) still passes.
struct TcpProxy::Link {
  int fd[2] = {-1, -1};
  std::string pending[2];                 // read from fd[side], not yet written to fd[1 - side]
  bool read_closed[2] = {false, false};   // fd[side] reached its end
  bool write_closed[2] = {false, false};  // fd[1 - side] was shut for writing after it
  bool failed = false;

  bool Done() const { return failed || (write_closed[0] && write_closed[1]); }
};

void TcpProxy::Run() {
  std::vector<Link> links;
  std::vector<char> buffer(1 << 16);
  // The rate limit: bytes relayed towards the target since it was set, against what it allows.
  uint64_t limited_rate = 0;
  std::chrono::steady_clock::time_point limited_since;
  uint64_t relayed_since_limit = 0;
  while (!stop_.load()) {
    // How many bytes may go towards the target now; reads from clients pause at zero, while
    // bytes back from the target keep flowing.
    size_t towards_target_budget = buffer.size();
    if (const uint64_t rate = rate_limit_.load(); rate != 0) {
      const auto now = std::chrono::steady_clock::now();
      if (rate != limited_rate) {
        limited_rate = rate;
        limited_since = now;
        relayed_since_limit = 0;
      }
      const double seconds = std::chrono::duration<double>(now - limited_since).count();
      const double allowed = seconds * static_cast<double>(rate) - relayed_since_limit;
      // Relayed in reads of at least a quantum (or a buffer, for slower rates' sake a ms of
      // the rate): reads of what a few microseconds allow would spin this thread on a core.
      const double quantum = std::min<double>(buffer.size(), std::max(1024.0, rate / 1000.0));
      towards_target_budget =
          allowed < quantum ? 0 : std::min(buffer.size(), static_cast<size_t>(allowed));
    }
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Link& link : links) {
      for (int side = 0; side < 2; ++side) {
        short events = 0;
        // Read a side only once what it sent before has been written on.
        const bool may_read = side == 1 || towards_target_budget > 0;
        if (!link.read_closed[side] && link.pending[side].empty() && may_read) events |= POLLIN;
        if (!link.pending[1 - side].empty()) events |= POLLOUT;
        fds.push_back({link.fd[side], events, 0});
      }
    }
    if (::poll(fds.data(), fds.size(), towards_target_budget > 0 ? 50 : 2) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      int accepted = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (accepted >= 0) {
        int upstream = ConnectLoopback(target_port_);
        if (upstream < 0) {
          ::close(accepted);
        } else {
          ::fcntl(upstream, F_SETFL, ::fcntl(upstream, F_GETFL) | O_NONBLOCK);
          Link link;
          link.fd[0] = accepted;
          link.fd[1] = upstream;
          links.push_back(std::move(link));
        }
      }
    }
    for (size_t i = 0; i < links.size() && 1 + 2 * i + 1 < fds.size(); ++i) {
      Link& link = links[i];
      for (int side = 0; side < 2 && !link.failed; ++side) {
        const short revents = fds[1 + 2 * i + side].revents;
        // Bytes waiting for this side to take them.
        std::string& incoming = link.pending[1 - side];
        if ((revents & (POLLOUT | POLLERR | POLLHUP)) && !incoming.empty()) {
          ssize_t w = ::send(link.fd[side], incoming.data(), incoming.size(), MSG_NOSIGNAL);
          if (w > 0) {
            incoming.erase(0, static_cast<size_t>(w));
          } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            link.failed = true;
            break;
          }
        }
        if (!(fds[1 + 2 * i + side].events & POLLIN)) {
          // Hung up both ways with nothing left to read or deliver: the link is over (and poll
          // would report the hang-up at once, forever).
          if ((revents & (POLLHUP | POLLERR)) && link.read_closed[side] && incoming.empty()) {
            link.failed = true;
          }
          continue;
        }
        if (!(revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const size_t most = side == 0 ? towards_target_budget : buffer.size();
        ssize_t n = ::read(link.fd[side], buffer.data(), most);
        if (n < 0) {
          if (errno != EAGAIN && errno != EINTR) link.failed = true;
          continue;
        }
        if (n == 0) {
          link.read_closed[side] = true;
          continue;
        }
        if (side == 0) {
          towards_target_budget -= static_cast<size_t>(n);
          relayed_since_limit += static_cast<uint64_t>(n);
        }
        std::lock_guard lock(mutex_);
        captured_.emplace_back(buffer.data(), static_cast<size_t>(n));
        if (side == corrupt_side_ && !corrupt_pattern_.empty()) {
          const std::string_view relayed(buffer.data(), static_cast<size_t>(n));
          const size_t at = relayed.find(corrupt_pattern_);
          if (at != std::string_view::npos) {
            buffer[at + corrupt_pattern_.size() / 2] ^= 0x10;
            corrupt_pattern_.clear();
            corrupted_ = true;
          }
        }
        link.pending[side].assign(buffer.data(), static_cast<size_t>(n));
      }
      // A side that ended, its bytes all passed on: end the other side's input too.
      for (int side = 0; side < 2; ++side) {
        if (link.read_closed[side] && link.pending[side].empty() && !link.write_closed[side]) {
          ::shutdown(link.fd[1 - side], SHUT_WR);
          link.write_closed[side] = true;
        }
      }
    }
    for (auto it = links.begin(); it != links.end();) {
      if (!it->Done()) {
        ++it;
        continue;
      }
      ::close(it->fd[0]);
      ::close(it->fd[1]);
      it = links.erase(it);
    }
  }
  for (const Link& link : links) {
    ::close(link.fd[0]);
    ::close(link.fd[1]);
  }
}

}  // namespace bm::testing
