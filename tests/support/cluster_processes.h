#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "common/security/curve_keys.h"
#include "tests/support/process.h"

namespace bm::testing {

struct WorkerSpec {
  std::string id;
  std::string memory = "64MiB";
  std::string disk_limit{};  // empty = no limit
  // More bm-worker arguments, e.g. {"--rack", "r1"}.
  std::vector<std::string> extra_args{};
  // The port to listen on; 0: a free one.
  int port = 0;
  // The bm-worker binary; empty: the one in ClusterOptions::bin_dir.
  std::string binary{};
};

// Where a cluster's processes come from and how they run.
struct ClusterOptions {
  // Its files: <dir>/<file_prefix>master.log, <file_prefix><id>.log, <file_prefix>disk-<id>
  // (a worker's disk directory) and <file_prefix>keys.
  std::string dir;
  std::string file_prefix{};
  double heartbeat_timeout_seconds = 10;
  // Where bm-master and bm-worker are; empty: this build's (BinaryPath).
  std::string bin_dir{};
  // Added to the arguments of the master and of every worker (e.g. {"--log-level", "warn"}).
  std::vector<std::string> server_args{};
  // --http on the master and every worker, each on a free loopback port (master_http(),
  // worker_http()).
  bool http = false;
};

// A real bm-master and bm-workers as child processes on free 127.0.0.1 ports, each with its own
// log file and disk directory, shared by the tests (LocalCluster adds GoogleTest assertions) and
// bm-bench. Everything is killed on destruction. Readiness is awaited by asking the master over
// ZeroMQ, never by sleeping. A server that exits before it is ready (its port was taken between
// choosing and binding it) is started again on fresh ports, unless its port is fixed.
//
// Owns its processes and a ZeroMQ context for its queries. Not thread-safe.
class ClusterProcesses {
 public:
  explicit ClusterProcesses(ClusterOptions options);
  ~ClusterProcesses();
  ClusterProcesses(const ClusterProcesses&) = delete;
  ClusterProcesses& operator=(const ClusterProcesses&) = delete;

  // From the next LaunchMaster on, the cluster runs with CURVE keys: keys_dir() then holds
  // master, admin and client keypairs and one worker keypair per id in `worker_ids`, and is
  // every server's allow-list (keys left there from before are removed first). The cluster's
  // own queries use the admin key.
  Status MakeKeys(const std::vector<std::string>& worker_ids);
  bool keys_on() const { return !keys_dir_.empty(); }
  const std::string& keys_dir() const { return keys_dir_; }
  // keys_dir()/NAME.key_secret and keys_dir()/NAME.key.
  std::string SecretKeyFile(const std::string& name) const;
  std::string PublicKeyFile(const std::string& name) const;
  // The channel security of key NAME talking to the server whose public certificate is
  // `server_name` (keys_dir()); empty with keys off.
  Result<ChannelSecurity> LoadSecurity(const std::string& name,
                                       const std::string& server_name) const;
  // Options for a client of this cluster: its master, and with keys on, key NAME from keys_dir()
  // and the master's public key. Everything else is ClientOptions' default.
  ClientOptions ClientOptionsFor(const std::string& key_name = "admin") const;

  // Starts bm-master (again on the same endpoint after KillMaster) and waits until it answers.
  Status LaunchMaster();
  // From the next LaunchMaster on, the master journals to `dir` (--state-dir); empty = none.
  void SetMasterStateDir(std::string dir) { master_state_dir_ = std::move(dir); }
  // From the next LaunchMaster on, these bm-master arguments are added (e.g. {"--http", ...}).
  void SetMasterExtraArgs(std::vector<std::string> args) { master_extra_args_ = std::move(args); }
  // Starts (or restarts, with the same port and disk dir) a worker and waits until the master
  // lists it.
  Status LaunchWorker(const WorkerSpec& spec);
  void SignalWorker(const std::string& id, int signal);
  void KillWorker(const std::string& id);
  void KillMaster();

  const std::string& master_endpoint() const { return master_endpoint_; }
  std::string worker_endpoint(const std::string& id) const;
  std::string worker_disk_dir(const std::string& id) const;
  Process& worker_process(const std::string& id);
  const Process& worker_process(const std::string& id) const;
  Process& master_process() { return *master_; }
  const Process& master_process() const { return *master_; }
  // With ClusterOptions::http: "http://127.0.0.1:PORT" of the master and of a worker.
  const std::string& master_http() const { return master_http_; }
  const std::string& worker_http(const std::string& id) const;

  // Ids of the workers the master lists now (empty if it does not answer).
  std::vector<std::string> ListedWorkers();
  // Waits until the master lists exactly these workers.
  bool WaitForWorkers(std::vector<std::string> ids,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // The port a process started with `--http HOST:0` serves HTTP on, read from its log ("http
  // on ... (port N)"); 0 if it has not logged one within the timeout.
  int HttpPort(const std::string& name,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // The ZeroMQ context the cluster's own queries use, for a caller's channels to its servers.
  zmq::context_t& context() { return context_; }
  // The log of process NAME ("master" or a worker id), and its tail for failure messages.
  std::string LogPath(const std::string& name) const;
  std::string LogTail(const std::string& name) const;

 private:
  struct WorkerSlot {
    WorkerSpec spec;
    int port;
    std::string http;
    std::unique_ptr<Process> process;
  };

  std::string FilePath(const std::string& name) const;
  std::string ServerBinary(const std::string& name) const;
  // With ClusterOptions::http: a free loopback address to serve HTTP on; empty without.
  std::string FreeHttpAddress() const;
  // `args` with ClusterOptions::server_args and `--http http_address` (when not empty) added.
  std::vector<std::string> WithServerArgs(std::vector<std::string> args,
                                          const std::string& http_address) const;

  const ClusterOptions options_;
  zmq::context_t context_;
  std::string master_endpoint_;
  std::string master_state_dir_;
  std::string keys_dir_;  // empty: keys off
  std::vector<std::string> master_extra_args_;
  std::string master_http_;
  std::unique_ptr<Process> master_;
  std::map<std::string, WorkerSlot> workers_;
};

}  // namespace bm::testing
