#pragma once

// Standby masters as child processes: a ZooKeeper, masters elected through it (each with its
// journal) and workers given every master's address or only the ZooKeeper. Shared by the
// failover tests and bm-bench's failover workload. Free of GoogleTest.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "tests/support/process.h"
#include "tests/support/zookeeper_server.h"

namespace bm::testing {

struct StandbyClusterOptions {
  // The masters' ids, each on a free loopback port; the first one started leads.
  std::vector<std::string> masters = {"a", "b"};
  // bm-master --session-timeout (seconds): bounds how soon a dead leader is replaced.
  double session_timeout_s = 1.5;
  double heartbeat_timeout_s = 5;
  std::string worker_memory = "64MiB";
  // Where its logs, journals and disk directories go (created if missing).
  std::string dir;
  // Added to every master's and worker's arguments (e.g. {"--log-level", "debug"}).
  std::vector<std::string> server_args{};
};

// Owns its processes (killed on destruction). Not thread-safe.
class StandbyCluster {
 public:
  explicit StandbyCluster(StandbyClusterOptions options);
  ~StandbyCluster();
  StandbyCluster(const StandbyCluster&) = delete;
  StandbyCluster& operator=(const StandbyCluster&) = delete;

  Status StartZooKeeper();
  ZooKeeperServer& zookeeper() { return *zookeeper_; }

  // Starts master `id` (again after it was killed, with its journal).
  void StartMaster(const std::string& id);
  Process& master(const std::string& id) { return *masters_.at(id); }
  std::string MasterAddress(const std::string& id) const;
  // Every master's address, comma-separated.
  std::string Masters() const;

  // Given every master's address, or (through_zookeeper) only the ZooKeeper.
  void StartWorker(const std::string& id, bool through_zookeeper = false);
  Process& worker(const std::string& id) { return *workers_.at(id); }

  // A client of the masters' list (through_zookeeper: of the ZooKeeper only), with a 3 s
  // reply timeout and a leader wait of 15 s.
  ClientOptions ClientOptionsFor(bool through_zookeeper = false) const;

  // Each master as it describes itself (masterInfo), by address.
  std::map<std::string, MasterInfo> MasterInfos(Client& client);
  // The id of the master that says it leads, "" when none does.
  std::string Leader(Client& client);
  // Waits until `id` leads.
  bool WaitForLeader(Client& client, const std::string& id, std::chrono::milliseconds timeout);
  // Waits until some standby holds everything the leader acknowledged.
  bool WaitForStandbyInSync(Client& client, std::chrono::milliseconds timeout);
  // Waits until the leader lists `count` workers.
  bool WaitForWorkers(Client& client, size_t count, std::chrono::milliseconds timeout);

  // The HTTP port master `id` logged ("http on ... (port N)"), 0 if none yet; and
  // {status, body} of GET `path` there (status 0 when it cannot be asked).
  int HttpPort(const std::string& id) const;
  std::pair<int, std::string> HttpGet(const std::string& id, const std::string& path) const;

  // The log of "master-ID" or a worker id.
  std::string LogOf(const std::string& name) const;

 private:
  std::string Path(const std::string& name) const { return options_.dir + "/" + name; }

  const StandbyClusterOptions options_;
  std::map<std::string, int> ports_;
  std::unique_ptr<ZooKeeperServer> zookeeper_;
  std::map<std::string, std::unique_ptr<Process>> masters_;
  std::map<std::string, std::unique_ptr<Process>> workers_;
};

}  // namespace bm::testing
