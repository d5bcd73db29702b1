#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"
#include "common/net/master_addresses.h"
#include "common/security/curve_keys.h"

namespace capnp {
class MallocMessageBuilder;
}
namespace zmq {
class context_t;
}

namespace bm {

class IncomingMessage;
class LeaderDirectory;
class RpcChannel;

// The calls a client makes to the master (PROTOCOL.md), over one channel connected on first
// use, with the master's replies decoded into the client's value types. Knows nothing of the
// client's caches: the caller updates them.
//
// Owns its channel; borrows the ZeroMQ context, which must outlive it. Not thread-safe: owned
// by one Client.
class MasterClient {
 public:
  // `security` is the channel's keys, or why they could not be read (then every call fails
  // with that). `timeout` is each reply's, before any slack a call adds.
  // `address` is one master's, or several comma-separated (common/net/master_addresses.h): a
  // call then goes to the leader, following standbys' notLeader answers and moving on from a
  // master that does not answer, for up to `leader_wait`.
  // `directory`, when given (--zookeeper), names the leader as ZooKeeper knows it: calls go
  // there first, and `address` may then be empty. An error (a malformed ZooKeeper address)
  // fails every call with it. It is shared (thread-safe) between the
  // MasterClients of one Client, so they keep one ZooKeeper session.
  MasterClient(zmq::context_t& context, std::string address, std::chrono::milliseconds timeout,
               Result<ChannelSecurity> security,
               std::chrono::milliseconds leader_wait = std::chrono::seconds(10),
               Result<std::shared_ptr<const LeaderDirectory>> directory =
                   std::shared_ptr<const LeaderDirectory>());
  ~MasterClient();
  MasterClient(const MasterClient&) = delete;
  MasterClient& operator=(const MasterClient&) = delete;

  // Sends `request` with `extra` added to the timeout for this call, to the leader: a standby's
  // notLeader and (with several masters) a master that does not answer send it on to the next.
  // Every master call is safe to retry: lookups and listings read; registerRdd, removals and
  // leases name what they act on.
  Result<IncomingMessage> Call(capnp::MallocMessageBuilder& request,
                               std::chrono::milliseconds extra = {});
  // Call for requests whose answer is a bare `ok`.
  Status CallForOk(capnp::MallocMessageBuilder& request);

  // The calls of the same names in blockmgr/client.h.
  Result<std::vector<BlockLocations>> Locations(const std::vector<BlockId>& ids);
  // The blocks whose last copy was lost, as the master keeps them (oldest first).
  Result<std::vector<LostBlockInfo>> LostBlocks();
  Result<std::vector<WorkerInfo>> Workers();
  Status ForEachBlockPage(std::optional<uint64_t> rdd_id,
                          const std::function<Status(const std::vector<BlockLocations>&)>& visit,
                          uint32_t page_size);
  Result<std::vector<RddInfo>> Rdds();
  Result<uint64_t> Remove(const std::vector<BlockId>& ids);
  Result<uint64_t> RemoveRdd(uint64_t rdd_id);
  Status RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                     uint64_t total_partitions);
  Status Decommission(const std::string& worker_id);
  Status Share(const std::string& dataset, const std::string& tenant, bool unshare);
  Status SetQuota(const std::string& tenant, uint64_t memory_bytes, uint64_t disk_bytes,
                  bool remove);
  Result<std::vector<TenantInfo>> Tenants();
  Status Ping();
  // Asks each master known (the addresses given, and leaders they named) for masterInfo.
  std::vector<MasterInfo> Masters();

 private:
  // Points masters_ at the leader ZooKeeper names, if it names one; waits up to `wait` for
  // one when no master address is known at all. False when no master is known.
  bool FollowDirectory(std::chrono::milliseconds wait);

  zmq::context_t& context_;
  Result<MasterAddresses> masters_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds leader_wait_;
  const Result<ChannelSecurity> security_;
  const std::shared_ptr<const LeaderDirectory> directory_;  // null without ZooKeeper
  uint64_t directory_epoch_ = 0;         // of the last leader followed because ZooKeeper named it
  std::unique_ptr<RpcChannel> channel_;  // connected on first use
};

}  // namespace bm
