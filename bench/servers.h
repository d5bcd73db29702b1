#pragma once

// The server processes a benchmark run talks to, each started on a free 127.0.0.1 port and
// awaited until it answers (never by sleeping), each stopped when its handle is destroyed.

#include <memory>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "tests/support/cluster_processes.h"
#include "tests/support/process.h"

namespace bm::bench {

using testing::Process;

// Where the run finds binaries and keeps its files.
struct BenchEnv {
  std::string bin_dir;   // bm-master, bm-worker and bm-bench itself
  std::string work_dir;  // logs and disk directories; must be on a disk with room
};

// A bm-master and its bm-workers as separate processes (the launcher the tests use), their
// workers numbered from 0 in the order started. Owns the processes, stopped on destruction.
// Not thread-safe.
class BlockmgrCluster {
 public:
  struct Options {
    // Prefix of its log files, disk directories and worker ids: <name>-master.log,
    // <name>-<name>-w1.log, ...
    std::string name;
    int workers = 1;
    std::string worker_memory = "1GiB";
    double heartbeat_timeout_s = 10;
    // Run with CURVE keys (made in the work directory); ClientOptionsFor() then names the admin
    // key.
    bool keys = false;
    bool http = false;  // --http on the master and every worker, on free loopback ports
    // The master journals to <work_dir>/<name>-state (--state-dir), as a restartable master
    // or one of standby masters does.
    bool journal = false;
    // The bm-worker binary; empty: the one in bin_dir.
    std::string worker_binary{};
    // More arguments for every bm-worker, e.g. {"--eviction", "lru"}.
    std::vector<std::string> worker_args{};
    // Where bm-master and bm-worker come from; empty: BenchEnv::bin_dir.
    std::string bin_dir{};
  };

  // Starts the master and the workers and waits until the master lists every worker.
  static Result<std::unique_ptr<BlockmgrCluster>> Start(const BenchEnv& env, Options options);

  const std::string& master_endpoint() const { return processes_.master_endpoint(); }
  pid_t master_pid() const { return processes_.master_process().pid(); }
  pid_t worker_pid(size_t i) const { return processes_.worker_process(worker_ids_.at(i)).pid(); }
  std::string worker_endpoint(size_t i) const {
    return processes_.worker_endpoint(worker_ids_.at(i));
  }
  // A client's options for this cluster (with Options::keys, the admin key's).
  ClientOptions ClientOptionsFor() const { return processes_.ClientOptionsFor(); }
  // With Options::http: "http://127.0.0.1:PORT" of the master and of worker i.
  const std::string& master_http() const { return processes_.master_http(); }
  const std::string& worker_http(size_t i) const {
    return processes_.worker_http(worker_ids_.at(i));
  }

 private:
  explicit BlockmgrCluster(testing::ClusterOptions options) : processes_(std::move(options)) {}

  testing::ClusterProcesses processes_;
  std::vector<std::string> worker_ids_;
};

// A peer server listening on `port`.
struct PeerServer {
  Process process;
  int port = 0;
};

// redis-server with persistence off (no RDB snapshots, no AOF).
Result<PeerServer> StartRedis(const BenchEnv& env);
// The same, serving only TLS (`--tls-port`) with the certificate and key given (PEM files).
Result<PeerServer> StartRedisTls(const BenchEnv& env, const std::string& cert_file,
                                 const std::string& key_file);
// memcached with items of up to `max_item_mib` MiB and `memory_mib` MiB of cache.
Result<PeerServer> StartMemcached(const BenchEnv& env, int max_item_mib, int memory_mib);
// `bm-bench --serve-zmq`: the raw ZeroMQ peer (bench/raw_zmq.h).
Result<PeerServer> StartRawZmqServer(const BenchEnv& env, uint64_t max_bytes);
// `iperf3 -s -1`: serves one test and exits.
Result<PeerServer> StartIperfServer(const BenchEnv& env);

}  // namespace bm::bench
