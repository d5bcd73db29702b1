#pragma once

#include <string>
#include <string_view>

#include "blockmgr/status.h"

namespace bm {

// A ZeroMQ tcp endpoint split into its parts: "tcp://10.0.0.5:7001" -> {"10.0.0.5", "7001"}.
// IPv6 hosts keep their brackets ("[::1]"). The port may be "*" (bind to any free port).
struct TcpAddress {
  std::string host;
  std::string port;
};

// Fails with kInvalidArgument unless `address` is tcp://HOST:PORT with a non-empty host and a
// decimal port in 1..65535 (or "*" when `allow_any_port`).
Result<TcpAddress> ParseTcpAddress(std::string_view address, bool allow_any_port);

// True for hosts that bind every interface ("*", "0.0.0.0", "[::]"): not an address anyone
// else can connect to.
bool IsWildcardHost(std::string_view host);

// "worker-<host>-<port>", with characters other than letters, digits, '.', '-' and '_'
// replaced by '_' (so IPv6 hosts give usable ids).
std::string DefaultWorkerId(const TcpAddress& address);

// True when the TCP connection `fd` comes from this host: its peer's address is the address it
// reached (a connection within one host leaves from the address it goes to, loopback or not;
// across hosts, or network namespaces, the two differ). False when unknown (fd < 0).
bool ConnectionFromThisHost(int fd);

}  // namespace bm
