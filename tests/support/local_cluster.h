#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "common/core/protocol.h"
#include "tests/support/cluster_processes.h"
#include "tests/support/process.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {

// One block as `bmctl --json blocks` lists it.
struct BlockCopies {
  int wanted = 0;                    // copies its level promises
  std::vector<std::string> workers;  // where the master lists it
};

// A test's cluster: the shared launcher (ClusterProcesses) in a temporary folder of its own, with
// GoogleTest conveniences: a server that does not start is a fatal test failure (wrap the
// starts in ASSERT_NO_FATAL_FAILURE), and bmctl and the workers can be asked what they hold.
// Everything is killed on destruction, before the folder is removed. Not thread-safe.
class LocalCluster {
 public:
  explicit LocalCluster(double heartbeat_timeout_seconds = 10);

  // From the next StartMaster on, the cluster runs with CURVE keys: keys_dir() then holds
  // master, admin and client keypairs and one worker keypair per id in `worker_ids`, and is
  // every server's allow-list. The cluster's own queries and Bmctl() use the admin key.
  void UseKeys(const std::vector<std::string>& worker_ids);
  bool keys_on() const { return processes_.keys_on(); }
  const std::string& keys_dir() const { return processes_.keys_dir(); }
  // keys_dir()/NAME.key_secret and keys_dir()/NAME.key.
  std::string SecretKeyFile(const std::string& name) const {
    return processes_.SecretKeyFile(name);
  }
  std::string PublicKeyFile(const std::string& name) const {
    return processes_.PublicKeyFile(name);
  }
  // The channel security of key NAME talking to the server whose public certificate is
  // `server_name` (keys_dir()); empty with keys off.
  ChannelSecurity SecurityOf(const std::string& name, const std::string& server_name) const;
  // Options for a client of this cluster (with keys on, using key NAME from keys_dir()).
  ClientOptions ClientOptionsFor(const std::string& key_name = "admin") const {
    return processes_.ClientOptionsFor(key_name);
  }

  // Starts bm-master (again on the same endpoint after KillMaster) and waits until it answers.
  void StartMaster();
  // From the next StartMaster on, the master journals to `dir` (--state-dir); empty = none.
  void SetMasterStateDir(std::string dir) { processes_.SetMasterStateDir(std::move(dir)); }
  // From the next StartMaster on, these bm-master arguments are added (e.g. {"--http", ...}).
  void SetMasterExtraArgs(std::vector<std::string> args) {
    processes_.SetMasterExtraArgs(std::move(args));
  }
  // Starts (or restarts, with the same port and disk dir) a worker and waits until the master
  // lists it.
  void StartWorker(const WorkerSpec& spec);
  // As StartWorker, listening on `proxy`'s target port and advertising the proxy's, so that
  // every client reaches the worker through the proxy: TcpProxy proxy(FreeLoopbackPort()).
  void StartWorkerBehind(const TcpProxy& proxy, WorkerSpec spec);
  void StartWorkers(int count, const std::string& memory = "64MiB");
  void SignalWorker(const std::string& id, int signal) { processes_.SignalWorker(id, signal); }
  void KillWorker(const std::string& id) { processes_.KillWorker(id); }
  void KillMaster() { processes_.KillMaster(); }

  const std::string& master_endpoint() const { return processes_.master_endpoint(); }
  std::string worker_endpoint(const std::string& id) const {
    return processes_.worker_endpoint(id);
  }
  std::string worker_disk_dir(const std::string& id) const {
    return processes_.worker_disk_dir(id);
  }
  Process& worker_process(const std::string& id) { return processes_.worker_process(id); }
  Process& master_process() { return processes_.master_process(); }
  const TempDir& dir() const { return dir_; }

  // Ids of the workers the master lists now (empty if it does not answer).
  std::vector<std::string> ListedWorkers() { return processes_.ListedWorkers(); }
  // Waits until the master lists exactly these workers.
  bool WaitForWorkers(std::vector<std::string> ids,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return processes_.WaitForWorkers(std::move(ids), timeout);
  }
  // Runs `bmctl --master <endpoint> args...` (with the admin key when keys are on).
  CommandResult Bmctl(const std::vector<std::string>& args, const std::string& input = "");
  // Runs bmctl with key NAME from keys_dir() (keys on).
  CommandResult BmctlAs(const std::string& name, const std::vector<std::string>& args,
                        const std::string& input = "");
  // Runs `bmctl --json ...`, records a test failure unless it exits 0, returns its output.
  nlohmann::json BmctlJson(const std::vector<std::string>& args, const std::string& input = "");
  // Where each listed block is, as {block id -> [(worker id, tier, size)]}, from `locations`.
  std::map<std::string, std::vector<std::tuple<std::string, std::string, uint64_t>>> Locations(
      const std::vector<std::string>& block_ids);
  // Every block the master lists, by id (empty if bmctl fails).
  std::map<std::string, BlockCopies> ListBlockCopies();
  // Whether the worker itself says it holds the block (asked over its data port, not the
  // master). Records a test failure if the worker does not answer.
  bool WorkerHolds(const std::string& worker_id, const std::string& block);
  // The port a process started with `--http HOST:0` serves HTTP on, read from its log ("http
  // on ... (port N)"); 0 if it has not logged one within the timeout.
  int HttpPort(const std::string& name,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) const {
    return processes_.HttpPort(name, timeout);
  }
  // Flips the byte at `offset` of `worker`'s copy of `block` on `tier` through the worker's
  // test-only corruptBlock request (the worker runs with --enable-fault-injection).
  Status CorruptCopy(const std::string& worker, const std::string& block, proto::Tier tier,
                     uint64_t offset);

  // The tail of a process's log, for failure messages.
  std::string LogTail(const std::string& name) const { return processes_.LogTail(name); }

 private:
  TempDir dir_;  // outlives the processes, which write into it
  ClusterProcesses processes_;
};

}  // namespace bm::testing
