// blockmgr across hosts: a master, three workers and a client, each in a network namespace of
// its own on a bridge (tests/multihost/host_network.h), talking over their own addresses as
// separate machines would. Includes a network partition: a worker's link goes down (the
// process keeps running), the master drops it and re-replicates its blocks, the link comes
// back, the worker registers again and the cluster converges.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <zmq.hpp>

#include "blockmgr/client.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"
#include "tests/multihost/host_network.h"
#include "tests/support/cluster_keys.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kMasterHost = 0;
constexpr int kFirstWorkerHost = 1;
constexpr int kWorkers = 3;
constexpr int kClientHost = 4;

std::string WorkerId(int host) { return "worker-" + std::string(1, char('a' + host - 1)); }

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<HostNetwork>> net = HostNetwork::Create(5);
    if (!net.ok()) {
      GTEST_SKIP() << "cannot create network namespaces on this machine (needs root or "
                      "CAP_NET_ADMIN, iproute2 and bridge support): "
                   << net.status().ToString();
    }
    net_ = std::move(net).value();
    // Hosts reached over a network run with keys, as the servers require off loopback: one
    // keypair per node and one for the client (admin, for removals), all in one allow-list.
    ASSERT_TRUE(CurveAvailable()) << "libzmq was built without CURVE";
    std::vector<std::string> workers;
    for (int host = kFirstWorkerHost; host < kFirstWorkerHost + kWorkers; ++host) {
      workers.push_back(WorkerId(host));
    }
    ASSERT_TRUE(GenerateClusterKeys(keys_, workers).ok());
    master_address_ = "tcp://" + net_->address(kMasterHost) + ":7077";
    auto [ip, args] = net_->InHost(kMasterHost, BinaryPath("bm-master"),
                                   {"--listen", master_address_, "--heartbeat-timeout", "2",
                                    "--key", keys_ + "/master.key_secret", "--allow", keys_});
    processes_.push_back(
        std::make_unique<Process>(Process::Start(ip, args, dir_.Sub("master.log"))));
    for (int host = kFirstWorkerHost; host < kFirstWorkerHost + kWorkers; ++host) {
      const std::string address = "tcp://" + net_->address(host) + ":7078";
      auto [wip, wargs] =
          net_->InHost(host, BinaryPath("bm-worker"),
                       {"--master",     master_address_,
                        "--listen",     address,
                        "--advertise",  address,
                        "--id",         WorkerId(host),
                        "--host",       "host-" + std::to_string(host),
                        "--memory",     "64MiB",
                        "--disk-dir",   dir_.Sub(WorkerId(host)),
                        "--key",        keys_ + "/" + WorkerId(host) + ".key_secret",
                        "--master-key", keys_ + "/master.key",
                        "--allow",      keys_});
      processes_.push_back(
          std::make_unique<Process>(Process::Start(wip, wargs, dir_.Sub(WorkerId(host) + ".log"))));
    }
    ASSERT_TRUE(WaitForWorkers({"worker-a", "worker-b", "worker-c"}));
  }

  void TearDown() override {
    processes_.clear();  // before the namespaces they run in
    net_.reset();
  }

  ClientOptions Options() const {
    ClientOptions options{.master_address = master_address_, .request_timeout = milliseconds(2000)};
    options.key_file = keys_ + "/admin.key_secret";
    options.master_key_file = keys_ + "/master.key";
    return options;
  }

  // Runs `use` with a fresh Client in the host's namespace.
  void WithClient(int host, const std::function<void(Client&)>& use) {
    net_->RunIn(host, [&] {
      Client client(Options());
      use(client);
    });
  }

  // The live workers, by id, as the client host's client sees them.
  std::map<std::string, WorkerInfo> Workers() {
    std::map<std::string, WorkerInfo> out;
    WithClient(kClientHost, [&](Client& client) {
      Result<std::vector<WorkerInfo>> workers = client.Workers();
      if (!workers.ok()) return;
      for (WorkerInfo& w : workers.value()) out[w.id] = w;
    });
    return out;
  }

  bool WaitForWorkers(const std::set<std::string>& ids,
                      std::chrono::milliseconds timeout = seconds(30)) {
    return WaitFor(
        [&] {
          std::set<std::string> listed;
          for (const auto& [id, info] : Workers()) listed.insert(id);
          return listed == ids;
        },
        timeout);
  }

  std::map<BlockId, std::vector<BlockLocation>> Locations(const std::vector<BlockId>& ids) {
    std::map<BlockId, std::vector<BlockLocation>> out;
    WithClient(kClientHost, [&](Client& client) {
      Result<std::vector<BlockLocations>> found = client.Locations(ids);
      if (!found.ok()) return;
      for (const BlockLocations& b : found.value()) out[b.block] = b.locations;
    });
    return out;
  }

  // Whether the worker itself says it holds the block (asked on its data port from the client
  // host, not the master).
  bool WorkerHolds(const std::string& address, const BlockId& id) {
    // The worker's key, as the master vouches for it.
    std::string worker_key;
    for (const auto& [worker_id, info] : Workers()) {
      if (info.address == address) worker_key = info.public_key;
    }
    Result<CurveKeys> own = LoadKeyPair(keys_ + "/admin.key_secret");
    EXPECT_TRUE(own.ok() && !worker_key.empty()) << "no key for the worker at " << address;
    if (!own.ok() || worker_key.empty()) return false;
    bool present = false;
    net_->RunIn(kClientHost, [&] {
      zmq::context_t context;
      RpcChannel channel(context, address, seconds(5), ChannelSecurity{*own, worker_key});
      capnp::MallocMessageBuilder request;
      request.initRoot<proto::Request>().initContainsBlock().setBlockId(id.ToString());
      Result<IncomingMessage> reply = channel.Call(request);
      EXPECT_TRUE(reply.ok()) << address << ": " << reply.status().ToString();
      present = reply.ok() && reply->reply().getContains().getPresent();
    });
    return present;
  }

  // Every block: readable byte-exact from the client host.
  void ExpectReadable(const std::map<BlockId, std::vector<std::byte>>& blocks) {
    WithClient(kClientHost, [&](Client& client) {
      for (const auto& [id, bytes] : blocks) {
        Result<std::vector<std::byte>> got = client.Get(id);
        ASSERT_TRUE(got.ok()) << id.ToString() << ": " << got.status().ToString();
        EXPECT_TRUE(got.value() == bytes) << id.ToString() << " differs";
      }
    });
  }

  // Puts `count` blocks of RDD `rdd` at `level` from the client host; returns their bytes.
  std::map<BlockId, std::vector<std::byte>> PutBlocks(uint64_t rdd, int count, StorageLevel level) {
    std::map<BlockId, std::vector<std::byte>> blocks;
    WithClient(kClientHost, [&](Client& client) {
      for (int p = 0; p < count; ++p) {
        const BlockId id = BlockId::Rdd(rdd, p);
        // Sizes from a few bytes to several 1 MiB pieces, so some puts stream in pieces.
        std::vector<std::byte> bytes =
            RandomByteVector(size_t(1) << (4 + 3 * p % 19), rdd * 100 + p);
        Result<PutResult> put = client.Put(id, bytes, level);
        ASSERT_TRUE(put.ok()) << id.ToString() << ": " << put.status().ToString();
        EXPECT_EQ(put.value().replicas.size(), put.value().copies_wanted) << id.ToString();
        blocks[id] = std::move(bytes);
      }
    });
    return blocks;
  }

  // The hosts (placement labels) of a block's copies, from the master's locations.
  std::set<std::string> HostsOf(const std::vector<BlockLocation>& locations,
                                const std::map<std::string, WorkerInfo>& workers) {
    std::set<std::string> hosts;
    for (const BlockLocation& l : locations) {
      auto it = workers.find(l.worker_id);
      if (it != workers.end()) hosts.insert(it->second.host);
    }
    return hosts;
  }

  // The partition scenario up to a converged cluster; `blocks` are the _2 blocks put before.
  void PartitionAndHeal(const std::map<BlockId, std::vector<std::byte>>& blocks);

  TempDir dir_;
  const std::string keys_ = dir_.Sub("keys");  // every node's keys and the allow-list
  std::unique_ptr<HostNetwork> net_;
  std::string master_address_;
  std::vector<std::unique_ptr<Process>> processes_;
};

TEST_F(MultiHostTest, PutsAndGetsAcrossHostsAreByteExactWithCopiesOnDistinctHosts) {
  const std::map<std::string, WorkerInfo> workers = Workers();
  for (int host = kFirstWorkerHost; host < kFirstWorkerHost + kWorkers; ++host) {
    const WorkerInfo& w = workers.at(WorkerId(host));
    EXPECT_EQ(w.address, "tcp://" + net_->address(host) + ":7078");  // --advertise
    EXPECT_EQ(w.host, "host-" + std::to_string(host));               // --host
  }
  const auto blocks = PutBlocks(1, 6, StorageLevel::kMemoryAndDisk2);
  std::vector<BlockId> ids;
  for (const auto& [id, bytes] : blocks) ids.push_back(id);
  for (const auto& [id, locations] : Locations(ids)) {
    EXPECT_EQ(locations.size(), 2u) << id.ToString();
    EXPECT_EQ(HostsOf(locations, workers).size(), 2u) << id.ToString();
  }
  ExpectReadable(blocks);
}

TEST_F(MultiHostTest, ClientOnAWorkersHostReadsThatWorkersCopyAsLocal) {
  const BlockId id = BlockId::Rdd(2, 0);
  const std::vector<std::byte> bytes = RandomByteVector(100000, 7);
  WithClient(kClientHost, [&](Client& client) {
    Result<PutResult> put =
        client.Put(id, bytes, StorageLevel::kMemoryOnly, PutOptions{.worker_id = "worker-b"});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  });
  auto never = []() -> Result<std::vector<std::byte>> { return InternalError("computed"); };
  // On worker-b's host its copy is local ...
  WithClient(2, [&](Client& client) {
    EXPECT_TRUE(client.IsLocalAddress("tcp://" + net_->address(2) + ":7078"));
    Result<std::vector<std::byte>> got = client.GetOrCompute(id, StorageLevel::kMemoryOnly, never);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(got.value() == bytes);
    EXPECT_EQ(client.counters().local_hits, 1u);
    EXPECT_EQ(client.counters().remote_hits, 0u);
  });
  // ... and on the client's host (no worker there) it is remote.
  WithClient(kClientHost, [&](Client& client) {
    Result<std::vector<std::byte>> got = client.GetOrCompute(id, StorageLevel::kMemoryOnly, never);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(client.counters().local_hits, 0u);
    EXPECT_EQ(client.counters().remote_hits, 1u);
  });
}

void MultiHostTest::PartitionAndHeal(const std::map<BlockId, std::vector<std::byte>>& blocks) {
  std::vector<BlockId> ids;
  for (const auto& [id, bytes] : blocks) ids.push_back(id);
  // The partitioned host: the one holding the most copies.
  std::map<std::string, int> copies;
  for (const auto& [id, locations] : Locations(ids)) {
    for (const BlockLocation& l : locations) ++copies[l.worker_id];
  }
  int host = kFirstWorkerHost;
  for (int h = kFirstWorkerHost; h < kFirstWorkerHost + kWorkers; ++h) {
    if (copies[WorkerId(h)] > copies[WorkerId(host)]) host = h;
  }
  const std::string cut = WorkerId(host);
  ASSERT_GT(copies[cut], 0);

  ASSERT_TRUE(net_->SetLinkUp(host, false).ok());
  std::set<std::string> others;
  for (int h = kFirstWorkerHost; h < kFirstWorkerHost + kWorkers; ++h) {
    if (h != host) others.insert(WorkerId(h));
  }
  ASSERT_TRUE(WaitForWorkers(others)) << cut << " was not dropped";
  EXPECT_TRUE(processes_[host]->Running()) << "a partition, not a crash";
  // Its blocks get their second copy back on the two workers still reachable.
  const bool replicated = WaitFor(
      [&] {
        for (const auto& [id, locations] : Locations(ids)) {
          std::set<std::string> on;
          for (const BlockLocation& l : locations) on.insert(l.worker_id);
          if (on != others) return false;
        }
        return Locations(ids).size() == ids.size();
      },
      seconds(60));
  ASSERT_TRUE(replicated) << "the blocks of " << cut << " were not re-replicated";
  ExpectReadable(blocks);

  ASSERT_TRUE(net_->SetLinkUp(host, true).ok());
  ASSERT_TRUE(WaitForWorkers({"worker-a", "worker-b", "worker-c"})) << cut << " did not rejoin";

  // Converged: every listed copy is held by its worker, every block is readable.
  const bool consistent = WaitFor(
      [&] {
        const std::map<std::string, WorkerInfo> workers = Workers();
        for (const auto& [id, locations] : Locations(ids)) {
          if (locations.size() < 2) return false;
          for (const BlockLocation& l : locations) {
            if (!workers.contains(l.worker_id) || !WorkerHolds(l.address, id)) return false;
          }
        }
        return true;
      },
      seconds(60));
  EXPECT_TRUE(consistent) << "a block is listed on a worker that does not hold it";
  ExpectReadable(blocks);
}

TEST_F(MultiHostTest, PartitionedWorkerIsDroppedReplacedAndRejoins) {
  const auto blocks = PutBlocks(3, 8, StorageLevel::kMemoryAndDisk2);
  PartitionAndHeal(blocks);
}

// After the partition heals, the rejoined worker's copies make some blocks over-replicated;
// the master trims them back to the level's count.
TEST_F(MultiHostTest, HealedPartitionLeavesNoExtraCopies) {
  const auto blocks = PutBlocks(4, 8, StorageLevel::kMemoryAndDisk2);
  PartitionAndHeal(blocks);
  if (HasFatalFailure()) return;
  std::vector<BlockId> ids;
  for (const auto& [id, bytes] : blocks) ids.push_back(id);
  const bool trimmed = WaitFor(
      [&] {
        for (const auto& [id, locations] : Locations(ids)) {
          if (locations.size() != 2) return false;
        }
        return true;
      },
      seconds(30));
  EXPECT_TRUE(trimmed) << "blocks keep more copies than their level after the partition healed";
  for (const auto& [id, locations] : Locations(ids)) {
    for (const BlockLocation& l : locations) EXPECT_TRUE(WorkerHolds(l.address, id));
  }
  ExpectReadable(blocks);
}

}  // namespace
}  // namespace bm::testing
