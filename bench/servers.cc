#include "bench/servers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/client.h"
#include "common/curve_keys.h"

namespace bm::bench {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(30);

std::string Loopback(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

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
                                  const std::string& log_path,
                                  const std::string& ready_text = "") {
  if (binary.empty()) return UnavailableError("binary not found: " + log_path);
  Status last = UnavailableError("no attempt made");
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int port = FreeLoopbackPort();
    if (!ready_text.empty()) std::filesystem::remove(log_path);  // no stale "ready" line
    ASSIGN_OR_RETURN(ChildProcess process, ChildProcess::Start(binary, make_args(port), log_path));
    auto listening = [&] {
      return ready_text.empty() ? PortAcceptsConnections(port) : LogContains(log_path, ready_text);
    };
    if (WaitUntil([&] { return !process.Running() || listening(); }, kStartTimeout) &&
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
  const std::string prefix = env.work_dir + "/" + options.name;
  const std::string keys = prefix + "-keys";
  std::vector<std::string> master_keys;
  if (options.keys) {
    std::filesystem::remove_all(keys);
    RETURN_IF_ERROR(GenerateCertificate(keys, "master", KeyRole::kMaster));
    RETURN_IF_ERROR(GenerateCertificate(keys, "admin", KeyRole::kAdmin));
    for (int i = 1; i <= options.workers; ++i) {
      RETURN_IF_ERROR(GenerateCertificate(keys, options.name + "-w" + std::to_string(i),
                                          KeyRole::kWorker));
    }
    master_keys = {"--key", keys + "/master.key_secret", "--allow", keys};
  }
  // A taken HTTP port makes the server exit, and StartListening tries again with fresh ports.
  std::string http_address;
  auto with_http = [&](std::vector<std::string> args) {
    if (options.http) {
      http_address = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
      args.push_back("--http");
      args.push_back(http_address);
    }
    return args;
  };
  ASSIGN_OR_RETURN(PeerServer master,
                   StartListening(
                       (options.bin_dir.empty() ? env.bin_dir : options.bin_dir) + "/bm-master",
                       [&](int port) -> std::vector<std::string> {
                         std::vector<std::string> args = {
                             "--listen", Loopback(port), "--heartbeat-timeout",
                             std::to_string(options.heartbeat_timeout_s), "--log-level", "warn"};
                         args.insert(args.end(), master_keys.begin(), master_keys.end());
                         return with_http(std::move(args));
                       },
                       prefix + "-master.log"));
  std::unique_ptr<BlockmgrCluster> cluster(
      new BlockmgrCluster(Loopback(master.port), std::move(master.process)));
  if (options.keys) {
    cluster->key_file_ = keys + "/admin.key_secret";
    cluster->master_key_file_ = keys + "/master.key";
  }
  if (options.http) cluster->master_http_ = "http://" + http_address;
  for (int i = 1; i <= options.workers; ++i) {
    const std::string id = options.name + "-w" + std::to_string(i);
    const std::string disk_dir = prefix + "-disk-w" + std::to_string(i);
    std::filesystem::remove_all(disk_dir);
    ASSIGN_OR_RETURN(PeerServer worker,
                     StartListening(
                         !options.worker_binary.empty() ? options.worker_binary
                         : (options.bin_dir.empty() ? env.bin_dir : options.bin_dir) + "/bm-worker",
                         [&](int port) -> std::vector<std::string> {
                           std::vector<std::string> args = {
                               "--master",   cluster->master_endpoint_,
                               "--listen",   Loopback(port),
                               "--memory",   options.worker_memory,
                               "--disk-dir", disk_dir,
                               "--id",       id,
                               "--log-level", "warn"};
                           if (options.keys) {
                             args.insert(args.end(),
                                         {"--key", keys + "/" + id + ".key_secret", "--master-key",
                                          keys + "/master.key", "--allow", keys});
                           }
                           return with_http(std::move(args));
                         },
                         prefix + "-" + id + ".log"));
    cluster->workers_.push_back(std::move(worker.process));
    if (options.http) cluster->worker_http_.push_back("http://" + http_address);
    cluster->worker_endpoints_.push_back(Loopback(worker.port));
  }
  // Ready when the master lists every worker.
  ClientOptions client_options;
  client_options.master_address = cluster->master_endpoint_;
  client_options.request_timeout = std::chrono::milliseconds(500);
  client_options.key_file = cluster->key_file_;
  client_options.master_key_file = cluster->master_key_file_;
  Client client(client_options);
  const bool ready = WaitUntil(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        return workers.ok() && workers->size() == static_cast<size_t>(options.workers);
      },
      kStartTimeout);
  if (!ready) return UnavailableError("the workers did not register; see " + prefix + "-*.log");
  return cluster;
}

Result<PeerServer> StartRedis(const BenchEnv& env) {
  return StartListening(
      FindOnPath("redis-server"),
      [](int port) -> std::vector<std::string> {
        return {"--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"};
      },
      env.work_dir + "/redis.log");
}

Result<PeerServer> StartRedisTls(const BenchEnv& env, const std::string& cert_file,
                                 const std::string& key_file) {
  return StartListening(
      FindOnPath("redis-server"),
      [&](int port) -> std::vector<std::string> {
        return {"--port", "0", "--tls-port", std::to_string(port), "--tls-cert-file", cert_file,
                "--tls-key-file", key_file, "--tls-ca-cert-file", cert_file,
                "--tls-auth-clients", "no", "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"};
      },
      env.work_dir + "/redis-tls.log");
}

Result<PeerServer> StartMemcached(const BenchEnv& env, int max_item_mib, int memory_mib) {
  return StartListening(
      FindOnPath("memcached"),
      [&](int port) -> std::vector<std::string> {
        return {"-p", std::to_string(port), "-l", "127.0.0.1", "-U", "0",
                "-m", std::to_string(memory_mib), "-I", std::to_string(max_item_mib) + "m",
                "-u", "root"};
      },
      env.work_dir + "/memcached.log");
}

Result<PeerServer> StartRawZmqServer(const BenchEnv& env, uint64_t max_bytes) {
  return StartListening(
      env.bin_dir + "/bm-bench",
      [&](int port) -> std::vector<std::string> {
        return {"--serve-zmq", Loopback(port), "--serve-bytes", std::to_string(max_bytes)};
      },
      env.work_dir + "/raw-zmq.log");
}

Result<PeerServer> StartIperfServer(const BenchEnv& env) {
  return StartListening(
      FindOnPath("iperf3"),
      [](int port) -> std::vector<std::string> {
        return {"-s", "-1", "-p", std::to_string(port), "-B", "127.0.0.1", "--forceflush"};
      },
      env.work_dir + "/iperf3-server.log", "Server listening");
}

}  // namespace bm::bench
