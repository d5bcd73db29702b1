#include "tests/support/standby_cluster.h"

#include <httplib.h>

#include <cstdlib>
#include <filesystem>

#include "tests/support/files.h"

namespace bm::testing {

StandbyCluster::StandbyCluster(StandbyClusterOptions options) : options_(std::move(options)) {
  std::filesystem::create_directories(options_.dir);
  for (const std::string& id : options_.masters) ports_[id] = FreeLoopbackPort();
}

StandbyCluster::~StandbyCluster() = default;

Status StandbyCluster::StartZooKeeper() {
  BM_ASSIGN_OR_RETURN(zookeeper_, ZooKeeperServer::Start());
  return Status::Ok();
}

std::string StandbyCluster::MasterAddress(const std::string& id) const {
  return "tcp://127.0.0.1:" + std::to_string(ports_.at(id));
}

std::string StandbyCluster::Masters() const {
  std::string out;
  for (const std::string& id : options_.masters) {
    if (!out.empty()) out += ',';
    out += MasterAddress(id);
  }
  return out;
}

void StandbyCluster::StartMaster(const std::string& id) {
  masters_[id] = std::make_unique<Process>(
      Process::Start(BinaryPath("bm-master"),
                     {"--listen", MasterAddress(id), "--zookeeper", zookeeper_->connect_string(),
                      "--state-dir", Path("master-" + id), "--id", id, "--session-timeout",
                      std::to_string(options_.session_timeout_s), "--heartbeat-timeout",
                      std::to_string(options_.heartbeat_timeout_s), "--http", "127.0.0.1:0"},
                     Path("master-" + id + ".log")));
}

void StandbyCluster::StartWorker(const std::string& id, bool through_zookeeper) {
  std::vector<std::string> args = {
      "--listen",   "tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort()),
      "--memory",   options_.worker_memory,
      "--disk-dir", Path("disk-" + id),
      "--id",       id};
  if (through_zookeeper) {
    args.insert(args.end(), {"--zookeeper", zookeeper_->connect_string()});
  } else {
    args.insert(args.end(), {"--master", Masters()});
  }
  args.insert(args.end(), options_.server_args.begin(), options_.server_args.end());
  workers_[id] =
      std::make_unique<Process>(Process::Start(BinaryPath("bm-worker"), args, Path(id + ".log")));
}

ClientOptions StandbyCluster::ClientOptionsFor(bool through_zookeeper) const {
  ClientOptions options;
  if (through_zookeeper) {
    options.zookeeper = zookeeper_->connect_string();
  } else {
    options.master_address = Masters();
  }
  options.request_timeout = std::chrono::seconds(3);
  options.leader_wait = std::chrono::seconds(15);
  return options;
}

std::map<std::string, MasterInfo> StandbyCluster::MasterInfos(Client& client) {
  std::map<std::string, MasterInfo> out;
  for (MasterInfo& info : client.Masters()) out[info.address] = info;
  return out;
}

std::string StandbyCluster::Leader(Client& client) {
  for (auto& [address, info] : MasterInfos(client)) {
    if (info.error.empty() && info.leader) return info.id;
  }
  return "";
}

bool StandbyCluster::WaitForLeader(Client& client, const std::string& id,
                                   std::chrono::milliseconds timeout) {
  return WaitFor([&] { return Leader(client) == id; }, timeout);
}

bool StandbyCluster::WaitForStandbyInSync(Client& client, std::chrono::milliseconds timeout) {
  return WaitFor(
      [&] {
        for (auto& [address, info] : MasterInfos(client)) {
          if (info.error.empty() && !info.leader && info.in_sync) return true;
        }
        return false;
      },
      timeout);
}

bool StandbyCluster::WaitForWorkers(Client& client, size_t count,
                                    std::chrono::milliseconds timeout) {
  return WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        return workers.ok() && workers->size() == count;
      },
      timeout);
}

int StandbyCluster::HttpPort(const std::string& id) const {
  const std::string log = LogOf("master-" + id);
  const size_t at = log.rfind("(port ");
  return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + 6);
}

std::pair<int, std::string> StandbyCluster::HttpGet(const std::string& id,
                                                    const std::string& path) const {
  httplib::Client http("127.0.0.1", HttpPort(id));
  http.set_connection_timeout(2);
  httplib::Result result = http.Get(path);
  if (!result) return {0, ""};
  return {result->status, result->body};
}

std::string StandbyCluster::LogOf(const std::string& name) const {
  return ReadFile(Path(name + ".log"));
}

}  // namespace bm::testing
