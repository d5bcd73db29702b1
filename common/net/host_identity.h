#pragma once

#include <string>

namespace bm {

// What tells two processes they share a host for same-host reads (docs/storage.md "Same-host
// reads"): the kernel's boot id and the network namespace's inode, e.g.
// "3f2a...-e1/net:4026531840". Two processes with the same identity run on one kernel and
// see the same network, so a Unix socket path one names is the other's too. The network
// namespace is part of it because processes in separate namespaces are separate hosts as far
// as addresses go (containers, the multi-host tests). BLOCKMGR_HOST_ID, when set, replaces it:
// for pods on one node that share the worker's socket directory through a volume but not its
// network namespace, set it to the node's name in both.
std::string HostIdentity();

}  // namespace bm
