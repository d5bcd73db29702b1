#include "bench/servers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bm::bench {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(30);

bool LogContains(const std::string& log_path, const std::string& text) {
  std::ifstream in(log_path);
  std::stringstream all;
  all << in.rdbuf();
  return all.str().find(text) != std::string::npos;
}

// Starts `binary` with the args `make_args(port)` gives on a free port until it listens there
// (a port can be taken between picking and binding it: then the server exits and we pick again).
// Listening is seen by connecting, or, for a server a probe connection would disturb, by
// `ready_text` appearing in its log.
Result<PeerServer> StartListening(const std::string& binary,
                                  const std::function<std::vector<std::string>(int)>& make_args,
                                  const std::string& log_path, const std::string& ready_text = "") {
  if (binary.empty()) return UnavailableError("binary not found: " + log_path);
  Status last = UnavailableError("no attempt made");
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = testing::FreeLoopbackPort();
    if (!ready_text.empty()) std::filesystem::remove(log_path);  // no stale "ready" line
    BM_ASSIGN_OR_RETURN(Process process, Process::Spawn(binary, make_args(port), log_path));
    auto listening = [&] {
      return ready_text.empty() ? testing::PortAcceptsConnections(port)
                                : LogContains(log_path, ready_text);
    };
    if (testing::WaitFor([&] { return !process.Running() || listening(); }, kStartTimeout) &&
        process.Running()) {
      return PeerServer{std::move(process), port};
    }
    last = UnavailableError(binary + " did not start listening; see " + log_path);
  }
  return last;
}

}  // namespace

Result<std::unique_ptr<BlockmgrCluster>> BlockmgrCluster::Start(const BenchEnv& env,
                                                                Options options) {
  std::unique_ptr<BlockmgrCluster> cluster(new BlockmgrCluster(
      testing::ClusterOptions{.dir = env.work_dir,
                              .file_prefix = options.name + "-",
                              .heartbeat_timeout_seconds = options.heartbeat_timeout_s,
                              .bin_dir = options.bin_dir.empty() ? env.bin_dir : options.bin_dir,
                              .server_args = {"--log-level", "warn"},
                              .http = options.http}));
  testing::ClusterProcesses& processes = cluster->processes_;
  for (int i = 1; i <= options.workers; ++i) {
    cluster->worker_ids_.push_back(options.name + "-w" + std::to_string(i));
  }
  if (options.keys) BM_RETURN_IF_ERROR(processes.MakeKeys(cluster->worker_ids_));
  if (options.journal) {
    const std::string state = env.work_dir + "/" + options.name + "-state";
    std::filesystem::remove_all(state);
    processes.SetMasterStateDir(state);
  }
  BM_RETURN_IF_ERROR(processes.LaunchMaster());
  for (const std::string& id : cluster->worker_ids_) {
    std::filesystem::remove_all(processes.worker_disk_dir(id));
    BM_RETURN_IF_ERROR(processes.LaunchWorker({.id = id,
                                               .memory = options.worker_memory,
                                               .disk_limit = "",
                                               .extra_args = options.worker_args,
                                               .binary = options.worker_binary}));
  }
  return cluster;
}

Result<PeerServer> StartRedis(const BenchEnv& env) {
  return StartListening(
      testing::FindOnPath("redis-server"),
      [](int port) -> std::vector<std::string> {
        return {
            "--port", std::to_string(port), "--bind", "127.0.0.1",   "--save", "", "--appendonly",
            "no",     "--protected-mode",   "no",     "--daemonize", "no"};
      },
      env.work_dir + "/redis.log");
}

Result<PeerServer> StartRedisTls(const BenchEnv& env, const std::string& cert_file,
                                 const std::string& key_file) {
  return StartListening(
      testing::FindOnPath("redis-server"),
      [&](int port) -> std::vector<std::string> {
        return {"--port",
                "0",
                "--tls-port",
                std::to_string(port),
                "--tls-cert-file",
                cert_file,
                "--tls-key-file",
                key_file,
                "--tls-ca-cert-file",
                cert_file,
                "--tls-auth-clients",
                "no",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--daemonize",
                "no"};
      },
      env.work_dir + "/redis-tls.log");
}

Result<PeerServer> StartMemcached(const BenchEnv& env, int max_item_mib, int memory_mib) {
  return StartListening(
      testing::FindOnPath("memcached"),
      [&](int port) -> std::vector<std::string> {
        return {"-p", std::to_string(port),
                "-l", "127.0.0.1",
                "-U", "0",
                "-m", std::to_string(memory_mib),
                "-I", std::to_string(max_item_mib) + "m",
                "-u", "root"};
      },
      env.work_dir + "/memcached.log");
}

Result<PeerServer> StartRawZmqServer(const BenchEnv& env, uint64_t max_bytes) {
  return StartListening(
      env.bin_dir + "/bm-bench",
      [&](int port) -> std::vector<std::string> {
        return {"--serve-zmq", testing::LoopbackEndpoint(port), "--serve-bytes",
                std::to_string(max_bytes)};
      },
      env.work_dir + "/raw-zmq.log");
}

Result<PeerServer> StartIperfServer(const BenchEnv& env) {
  return StartListening(
      testing::FindOnPath("iperf3"),
      [](int port) -> std::vector<std::string> {
        return {"-s", "-1", "-p", std::to_string(port), "-B", "127.0.0.1", "--forceflush"};
      },
      env.work_dir + "/iperf3-server.log", "Server listening");
}

}  // namespace bm::bench
