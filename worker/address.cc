#include "worker/address.h"

#include <cctype>

namespace bm {

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
