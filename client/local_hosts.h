#pragma once

// Which workers are "on this host": get-or-compute reads from them first and stores there, as
// Spark prefers the local block manager.

#include <string>
#include <string_view>
#include <vector>

namespace bm {

// The names this machine answers to: "localhost", the loopback addresses, its host name and
// the addresses of its network interfaces.
std::vector<std::string> DetectLocalHosts();

// The host part of a ZeroMQ address: "10.0.0.5" for "tcp://10.0.0.5:7701", "::1" for
// "tcp://[::1]:7701". Empty for addresses that name no host (ipc://, inproc://).
std::string HostOfAddress(std::string_view address);

// True when `address` is on one of `local_hosts`; ipc:// and inproc:// addresses always are.
bool IsLocalAddress(std::string_view address, const std::vector<std::string>& local_hosts);

}  // namespace bm
