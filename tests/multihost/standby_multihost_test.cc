// Standby masters across hosts: ZooKeeper on host 0; master a (the leader) and worker-a on
// host 1; master b and worker-b on host 2; worker-c and a client on host 3, each host in a
// network namespace of its own (tests/multihost/host_network.h). Host 1's link goes down with
// the leader on it: a loses ZooKeeper and stops leading, b takes over, and the clients on
// both sides of the cut converge on b: host 3's at once, host 1's once the link is back, when
// a has rejoined as b's standby.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "common/security/curve_keys.h"
#include "tests/multihost/host_network.h"
#include "tests/support/cluster_keys.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/zookeeper_server.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr int kZooKeeperHost = 0;
constexpr int kHostA = 1;  // master a, worker-a
constexpr int kHostB = 2;  // master b, worker-b
constexpr int kHostC = 3;  // worker-c, the client that stays connected

class MultiHostStandbyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ZooKeeperServer::Available()) GTEST_SKIP() << ZooKeeperServer::kNotInstalled;
    Result<std::unique_ptr<HostNetwork>> net = HostNetwork::Create(4);
    if (!net.ok()) {
      GTEST_SKIP() << "cannot create network namespaces on this machine (needs root or "
                      "CAP_NET_ADMIN, iproute2 and bridge support): "
                   << net.status().ToString();
    }
    net_ = std::move(net).value();
    // Off loopback the servers need keys: both masters share one keypair (workers and clients
    // trust one master key; the standby follows the leader with it).
    ASSERT_TRUE(CurveAvailable()) << "libzmq was built without CURVE";
    ASSERT_TRUE(GenerateClusterKeys(keys_, {"worker-a", "worker-b", "worker-c"}).ok());
    // Started from a thread in host 0's namespace, ZooKeeper lives there.
    Status zookeeper = Status::Ok();
    net_->RunIn(kZooKeeperHost, [&] {
      Result<std::unique_ptr<ZooKeeperServer>> started =
          ZooKeeperServer::Start({.address = net_->address(kZooKeeperHost)});
      if (!started.ok()) {
        zookeeper = started.status();
        return;
      }
      zookeeper_ = std::move(started).value();
    });
    ASSERT_TRUE(zookeeper.ok()) << zookeeper.ToString();

    StartMaster(kHostA, "a");
    ASSERT_TRUE(WaitFor([&] { return Leader(kHostC) == "a"; }, seconds(30))) << LogOf("master-a");
    StartMaster(kHostB, "b");
    StartWorker(kHostA, "worker-a");
    StartWorker(kHostB, "worker-b");
    StartWorker(kHostC, "worker-c");
    ASSERT_TRUE(WaitFor(
        [&] {
          size_t listed = 0;
          WithClient(kHostC, Options(), [&](Client& client) {
            Result<std::vector<WorkerInfo>> workers = client.Workers();
            if (workers.ok()) listed = workers->size();
          });
          return listed == 3;
        },
        seconds(30)))
        << LogOf("worker-a");
    ASSERT_TRUE(StandbyInSync(kHostC)) << LogOf("master-b");
  }

  void TearDown() override {
    processes_.clear();  // before the namespaces they run in
    zookeeper_.reset();
    net_.reset();
  }

  std::string MasterAddress(int host) const { return "tcp://" + net_->address(host) + ":7077"; }

  void StartMaster(int host, const std::string& id) {
    auto [ip, args] = net_->InHost(
        host, BinaryPath("bm-master"),
        {"--listen", MasterAddress(host), "--id", id, "--zookeeper", zookeeper_->connect_string(),
         "--state-dir", dir_.Sub("master-" + id), "--session-timeout", "1.5", "--heartbeat-timeout",
         "5", "--key", keys_ + "/master.key_secret", "--allow", keys_});
    processes_.push_back(
        std::make_unique<Process>(Process::Start(ip, args, dir_.Sub("master-" + id + ".log"))));
  }

  void StartWorker(int host, const std::string& id) {
    const std::string address = "tcp://" + net_->address(host) + ":7078";
    auto [ip, args] = net_->InHost(
        host, BinaryPath("bm-worker"),
        {"--master", MasterAddress(kHostA) + "," + MasterAddress(kHostB), "--listen", address,
         "--id", id, "--host", "host-" + std::to_string(host), "--memory", "64MiB", "--disk-dir",
         dir_.Sub(id), "--key", keys_ + "/" + id + ".key_secret", "--master-key",
         keys_ + "/master.key", "--allow", keys_});
    processes_.push_back(
        std::make_unique<Process>(Process::Start(ip, args, dir_.Sub(id + ".log"))));
  }

  // Both masters' addresses; calls wait up to `leader_wait` for a leader.
  ClientOptions Options(milliseconds leader_wait = seconds(15)) const {
    ClientOptions options;
    options.master_address = MasterAddress(kHostA) + "," + MasterAddress(kHostB);
    options.request_timeout = seconds(2);
    options.leader_wait = leader_wait;
    options.key_file = keys_ + "/admin.key_secret";
    options.master_key_file = keys_ + "/master.key";
    return options;
  }

  // Runs `use` with a fresh Client in the host's namespace.
  void WithClient(int host, const ClientOptions& options, const std::function<void(Client&)>& use) {
    net_->RunIn(host, [&] {
      Client client(options);
      use(client);
    });
  }

  // Each master as it describes itself to a client on `host`, by id ("" for unreachable ones).
  std::map<std::string, MasterInfo> Masters(int host) {
    std::map<std::string, MasterInfo> out;
    WithClient(host, Options(seconds(2)), [&](Client& client) {
      for (MasterInfo& info : client.Masters()) {
        if (info.error.empty()) out[info.id] = info;
      }
    });
    return out;
  }

  // The master that says it leads, as seen from `host`; "" when none reachable does.
  std::string Leader(int host) {
    for (const auto& [id, info] : Masters(host)) {
      if (info.leader) return id;
    }
    return "";
  }

  bool StandbyInSync(int host) {
    return WaitFor(
        [&] {
          for (const auto& [id, info] : Masters(host)) {
            if (!info.leader && info.in_sync) return true;
          }
          return false;
        },
        seconds(20));
  }

  std::string LogOf(const std::string& name) const { return ReadFile(dir_.Sub(name + ".log")); }

  TempDir dir_;
  const std::string keys_ = dir_.Sub("keys");
  std::unique_ptr<HostNetwork> net_;
  std::unique_ptr<ZooKeeperServer> zookeeper_;
  std::vector<std::unique_ptr<Process>> processes_;
};

TEST_F(MultiHostStandbyTest, CutOffLeadersHostIsReplacedAndClientsOnBothSidesConverge) {
  std::map<BlockId, std::vector<std::byte>> blocks;
  WithClient(kHostC, Options(), [&](Client& client) {
    for (uint32_t p = 0; p < 6; ++p) {
      const BlockId id = BlockId::Rdd(20, p);
      std::vector<std::byte> bytes = RandomByteVector(size_t(1) << (8 + 2 * p), 20 + p);
      Result<PutResult> put = client.Put(id, bytes, StorageLevel::kMemoryAndDisk2);
      ASSERT_TRUE(put.ok()) << id.ToString() << ": " << put.status().ToString();
      blocks[id] = std::move(bytes);
    }
  });
  ASSERT_TRUE(StandbyInSync(kHostC));

  ASSERT_TRUE(net_->SetLinkUp(kHostA, false).ok());
  const auto cut = Clock::now();
  // Host 3's side: b leads once a's session expires, and answers with a's metadata.
  WithClient(kHostC, Options(), [&](Client& client) {
    Result<std::vector<BlockLocations>> located = client.Locations({BlockId::Rdd(20, 0)});
    ASSERT_TRUE(located.ok()) << located.status().ToString() << LogOf("master-b");
    ASSERT_EQ(located->size(), 1u);
    EXPECT_FALSE((*located)[0].locations.empty());
  });
  std::printf("cut-off leader replaced: link down to the first lookup through b: %.0f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - cut).count());
  ASSERT_TRUE(WaitFor([&] { return Leader(kHostC) == "b"; }, seconds(10))) << LogOf("master-b");

  // Host 1's side reaches neither ZooKeeper nor b: a has stopped leading, so a client there
  // is told no master leads rather than answered by a stale leader.
  WithClient(kHostA, Options(seconds(2)), [&](Client& client) {
    Result<std::vector<BlockLocations>> located = client.Locations({BlockId::Rdd(20, 0)});
    EXPECT_EQ(located.status().code(), StatusCode::kUnavailable) << located.status().ToString();
  });

  // Writes go on through b while the cut lasts.
  const BlockId during = BlockId::Rdd(21, 0);
  const std::vector<std::byte> during_bytes = RandomByteVector(4096, 21);
  WithClient(kHostC, Options(), [&](Client& client) {
    Result<PutResult> put = client.Put(during, during_bytes, StorageLevel::kMemoryAndDisk2);
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  });
  blocks[during] = during_bytes;

  // The link comes back: a rejoins as b's standby, and host 1's client follows b.
  ASSERT_TRUE(net_->SetLinkUp(kHostA, true).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        std::map<std::string, MasterInfo> masters = Masters(kHostA);
        return masters.contains("a") && masters.contains("b") && masters["b"].leader &&
               !masters["a"].leader && masters["a"].in_sync;
      },
      seconds(30)))
      << LogOf("master-a");
  for (int host : {kHostA, kHostC}) {
    EXPECT_EQ(Leader(host), "b") << "from host " << host;
    WithClient(host, Options(), [&](Client& client) {
      for (const auto& [id, bytes] : blocks) {
        Result<std::vector<std::byte>> got = client.Get(id);
        ASSERT_TRUE(got.ok()) << "host " << host << ", " << id.ToString() << ": "
                              << got.status().ToString();
        EXPECT_TRUE(*got == bytes) << "host " << host << ", " << id.ToString();
      }
    });
  }
}

}  // namespace
}  // namespace bm::testing
