#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
  return captured_;
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

void TcpProxy::Run() {
  // Pairs of (accepted, upstream) descriptors; data read on one is written to the other.
  std::vector<std::pair<int, int>> links;
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
      towards_target_budget =
          allowed <= 0 ? 0 : std::min(buffer.size(), static_cast<size_t>(allowed));
    }
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (auto [a, b] : links) {
      fds.push_back({a, static_cast<short>(towards_target_budget > 0 ? POLLIN : 0), 0});
      fds.push_back({b, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), towards_target_budget > 0 ? 50 : 2) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      int accepted = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (accepted >= 0) {
        int upstream = ConnectLoopback(target_port_);
        if (upstream < 0) {
          ::close(accepted);
        } else {
          links.emplace_back(accepted, upstream);
        }
      }
    }
    std::vector<size_t> closed;
    for (size_t i = 0; i < links.size() && 1 + 2 * i + 1 < fds.size(); ++i) {
      for (int side = 0; side < 2; ++side) {
        const pollfd& p = fds[1 + 2 * i + side];
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = side == 0 ? links[i].first : links[i].second;
        const int to = side == 0 ? links[i].second : links[i].first;
        const size_t most = side == 0 ? towards_target_budget : buffer.size();
        if (most == 0) continue;
        ssize_t n = ::read(from, buffer.data(), most);
        if (n <= 0) {
          closed.push_back(i);
          break;
        }
        if (side == 0) {
          towards_target_budget -= static_cast<size_t>(n);
          relayed_since_limit += static_cast<uint64_t>(n);
        }
        {
          std::lock_guard lock(mutex_);
          captured_.append(buffer.data(), static_cast<size_t>(n));
          if (side == corrupt_side_ && !corrupt_pattern_.empty()) {
            const std::string_view relayed(buffer.data(), static_cast<size_t>(n));
            const size_t at = relayed.find(corrupt_pattern_);
            if (at != std::string_view::npos) {
              buffer[at + corrupt_pattern_.size() / 2] ^= 0x10;
              corrupt_pattern_.clear();
              corrupted_ = true;
            }
          }
        }
        for (ssize_t sent = 0; sent < n;) {
          ssize_t w = ::write(to, buffer.data() + sent, static_cast<size_t>(n - sent));
          if (w <= 0) break;
          sent += w;
        }
      }
    }
    for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
      ::close(links[*it].first);
      ::close(links[*it].second);
      links.erase(links.begin() + static_cast<ptrdiff_t>(*it));
    }
  }
  for (auto [a, b] : links) {
    ::close(a);
    ::close(b);
  }
}

}  // namespace bm::testing
