#include "worker/address.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstring>

namespace bm {

bool ConnectionFromThisHost(int fd) {
  if (fd < 0) return false;
  sockaddr_storage peer{};
  sockaddr_storage own{};
  socklen_t peer_length = sizeof peer;
  socklen_t own_length = sizeof own;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&own), &own_length) != 0 ||
      peer.ss_family != own.ss_family) {
    return false;
  }
  if (peer.ss_family == AF_INET) {
    return reinterpret_cast<sockaddr_in&>(peer).sin_addr.s_addr ==
           reinterpret_cast<sockaddr_in&>(own).sin_addr.s_addr;
  }
  if (peer.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<sockaddr_in6&>(peer).sin6_addr,
                       &reinterpret_cast<sockaddr_in6&>(own).sin6_addr, sizeof(in6_addr)) == 0;
  }
  return peer.ss_family == AF_UNIX;  // ipc://
}

Result<TcpAddress> ParseTcpAddress(std::string_view address, bool allow_any_port) {
  constexpr std::string_view kScheme = "tcp://";
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("bad address '" + std::string(address) + "': " + why +
                                " (expected tcp://HOST:PORT)");
  };
  if (address.substr(0, kScheme.size()) != kScheme) return bad("not a tcp:// address");
  std::string_view rest = address.substr(kScheme.size());
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  TcpAddress out{std::string(rest.substr(0, colon)), std::string(rest.substr(colon + 1))};
  if (out.host.empty()) return bad("no host");
  if (out.host.front() != '[' && out.host.find(':') != std::string::npos) {
    return bad("IPv6 hosts need brackets");
  }
  if (out.port == "*") {
    if (!allow_any_port) return bad("port '*' is not allowed here");
    return out;
  }
  if (out.port.empty() || out.port.size() > 5) return bad("bad port");
  unsigned long port = 0;
  for (char c : out.port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad("bad port");
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  if (port == 0 || port > 65535) return bad("port out of range");
  return out;
}

bool IsWildcardHost(std::string_view host) {
  return host == "*" || host == "0.0.0.0" || host == "[::]" || host == "[0:0:0:0:0:0:0:0]";
}

std::string DefaultWorkerId(const TcpAddress& address) {
  std::string id = "worker-" + address.host + "-" + address.port;
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return id;
}

}  // namespace bm
