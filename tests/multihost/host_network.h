#pragma once

// Several "hosts" on one machine for tests: network namespaces joined by a bridge, each with
// its own address in 10.213.1.0/24 (a private test subnet that exists only inside these
// namespaces: the bridge has no address in the machine's own namespace, so nothing routes
// there). Names carry the test's pid, so concurrent runs do not collide.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm::testing {

// Owns the bridge, the namespaces and their links, and tears them down on destruction. If the
// test process dies instead (a crash, SIGINT, SIGKILL), a detached watchdog started with the
// network kills what still runs in the namespaces and deletes them. Not thread-safe.
class HostNetwork {
 public:
  // kUnavailable with the reason when namespaces cannot be made here (not root, no
  // CAP_NET_ADMIN, no `ip`, no bridge support).
  static Result<std::unique_ptr<HostNetwork>> Create(int hosts);
  ~HostNetwork();
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  const std::string& namespace_name(int host) const { return namespaces_[host]; }
  // 10.213.1.(10 + host)
  std::string address(int host) const;
  // Takes the host's link to the bridge down or up (a network partition: its processes keep
  // running but reach no one).
  Status SetLinkUp(int host, bool up);
  // `binary args...` prefixed to run inside the host's namespace (ip netns exec), for
  // Process::Start / RunCommand.
  std::pair<std::string, std::vector<std::string>> InHost(int host, const std::string& binary,
                                                          std::vector<std::string> args) const;
  // Runs `fn` on a thread that has entered the host's network namespace, and waits for it:
  // sockets it opens (ZeroMQ's I/O threads included, as they start from it) live there.
  void RunIn(int host, const std::function<void()>& fn) const;

 private:
  HostNetwork() = default;
  Status Ip(const std::vector<std::string>& args) const;
  void TearDown();

  std::string ip_;
  std::string bridge_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> host_links_;  // the bridge side of each host's veth pair
};

}  // namespace bm::testing
