#include "client/local_hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>

namespace bm {

std::vector<std::string> DetectLocalHosts() {
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1", "0.0.0.0"};
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) == 0) hosts.emplace_back(name.data());
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    for (ifaddrs* entry = interfaces; entry != nullptr; entry = entry->ifa_next) {
      if (entry->ifa_addr == nullptr) continue;
      std::array<char, INET6_ADDRSTRLEN> text{};
      const int family = entry->ifa_addr->sa_family;
      const void* address = nullptr;
      if (family == AF_INET) {
        address = &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr;
      } else if (family == AF_INET6) {
        address = &reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr)->sin6_addr;
      } else {
        continue;
      }
      if (inet_ntop(family, address, text.data(), text.size()) != nullptr) {
        hosts.emplace_back(text.data());
      }
    }
    freeifaddrs(interfaces);
  }
  std::sort(hosts.begin(), hosts.end());
  hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
  return hosts;
}

std::string HostOfAddress(std::string_view address) {
  constexpr std::string_view kTcp = "tcp://";
  if (!address.starts_with(kTcp)) return "";
  address.remove_prefix(kTcp.size());
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    return close == std::string_view::npos ? "" : std::string(address.substr(1, close - 1));
  }
  return std::string(address.substr(0, address.rfind(':')));
}

bool IsLocalAddress(std::string_view address, const std::vector<std::string>& local_hosts) {
  if (address.starts_with("ipc://") || address.starts_with("inproc://")) return true;
  const std::string host = HostOfAddress(address);
  return !host.empty() &&
         std::find(local_hosts.begin(), local_hosts.end(), host) != local_hosts.end();
}

}  // namespace bm
