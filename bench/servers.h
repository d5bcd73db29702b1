#pragma once

// The server processes a benchmark run talks to, each started on a free 127.0.0.1 port and
// awaited until it answers (never by sleeping), each stopped when its handle is destroyed.

#include <memory>
#include <string>
#include <vector>

#include "bench/child_process.h"
#include "common/status.h"

namespace bm::bench {

// Where the run finds binaries and keeps its files.
struct BenchEnv {
  std::string bin_dir;   // bm-master, bm-worker and bm-bench itself
  std::string work_dir;  // logs and disk directories; must be on a disk with room
};

// A bm-master and its bm-workers as separate processes.
class BlockmgrCluster {
 public:
  struct Options {
    std::string name;  // prefix of its log files and disk directories
    int workers = 1;
    std::string worker_memory = "1GiB";
    double heartbeat_timeout_s = 10;
    // Run with CURVE keys (made in the work directory); clients then need key_file() and
    // master_key_file() (an admin key).
    bool keys = false;
    bool http = false;  // --http on the master and every worker, on free loopback ports
    // The bm-worker binary; empty: the one in bin_dir.
    std::string worker_binary{};
    // Where bm-master and bm-worker come from; empty: BenchEnv::bin_dir.
    std::string bin_dir{};
  };

  static Result<std::unique_ptr<BlockmgrCluster>> Start(const BenchEnv& env, Options options);

  const std::string& master_endpoint() const { return master_endpoint_; }
  pid_t master_pid() const { return master_.pid(); }
  pid_t worker_pid(size_t i) const { return workers_.at(i).pid(); }
  const std::string& worker_endpoint(size_t i) const { return worker_endpoints_.at(i); }
  // Empty without keys.
  const std::string& key_file() const { return key_file_; }
  const std::string& master_key_file() const { return master_key_file_; }
  // With Options::http: "http://127.0.0.1:PORT" of the master and of each worker.
  const std::string& master_http() const { return master_http_; }
  const std::vector<std::string>& worker_http() const { return worker_http_; }

 private:
  BlockmgrCluster(std::string master_endpoint, ChildProcess master)
      : master_endpoint_(std::move(master_endpoint)), master_(std::move(master)) {}

  std::string master_endpoint_;
  ChildProcess master_;
  std::vector<ChildProcess> workers_;
  std::vector<std::string> worker_endpoints_;
  std::string key_file_;
  std::string master_key_file_;
  std::string master_http_;
  std::vector<std::string> worker_http_;
};

// A peer server listening on `port`.
struct PeerServer {
  ChildProcess process;
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
