#include "tests/support/local_cluster.h"

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/protocol.h"
#include "common/transport.h"

namespace bm::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(30);

// Asks the master for its workers over a fresh channel; nullopt when it does not answer.
std::optional<std::vector<std::string>> QueryWorkers(zmq::context_t& context,
                                                     const std::string& endpoint,
                                                     const ChannelSecurity& security) {
  RpcChannel channel(context, endpoint, std::chrono::milliseconds(500), security);
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().setListWorkers();
  Result<IncomingMessage> reply = channel.Call(request);
  if (!reply.ok()) return std::nullopt;
  std::vector<std::string> ids;
  for (proto::WorkerInfo::Reader w : reply->reply().getWorkers()) ids.push_back(w.getWorkerId());
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

LocalCluster::LocalCluster(double heartbeat_timeout_seconds)
    : heartbeat_timeout_seconds_(heartbeat_timeout_seconds) {}

LocalCluster::~LocalCluster() {
  for (auto& [id, slot] : workers_) {
    if (slot.process) slot.process->Kill();
  }
  if (master_) master_->Kill();
}

void LocalCluster::StartMaster() {
  // A port can be taken between choosing and binding it; then the master exits and we retry.
  // A restart reuses the endpoint, since running workers know the master by it.
  const bool restart = !master_endpoint_.empty();
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (!restart) master_endpoint_ = LoopbackEndpoint(FreeLoopbackPort());
    std::vector<std::string> args = {"--listen", master_endpoint_, "--heartbeat-timeout",
                                     std::to_string(heartbeat_timeout_seconds_)};
    if (!master_state_dir_.empty()) {
      args.push_back("--state-dir");
      args.push_back(master_state_dir_);
    }
    if (keys_on()) {
      args.insert(args.end(), {"--key", SecretKeyFile("master"), "--allow", keys_dir_});
    }
    args.insert(args.end(), master_extra_args_.begin(), master_extra_args_.end());
    master_ = std::make_unique<Process>(
        Process::Start(BinaryPath("bm-master"), args, dir_.Sub("master.log")));
    bool up = WaitFor(
        [&] { return !master_->Running() || QueryWorkers(context_, master_endpoint_, SecurityOf("admin", "master")).has_value(); },
        kStartTimeout);
    if (up && master_->Running()) return;
  }
  FAIL() << "bm-master did not start:\n" << LogTail("master");
}

void LocalCluster::StartWorkerBehind(const TcpProxy& proxy, WorkerSpec spec) {
  spec.port = proxy.target_port();
  spec.extra_args.push_back("--advertise");
  spec.extra_args.push_back(LoopbackEndpoint(proxy.port()));
  StartWorker(spec);
}

void LocalCluster::StartWorker(const WorkerSpec& spec) {
  auto it = workers_.find(spec.id);
  int port = it != workers_.end() ? it->second.port
             : spec.port != 0      ? spec.port
                                   : FreeLoopbackPort();
  WorkerSlot& slot = workers_[spec.id];
  slot.spec = spec;
  slot.port = port;
  std::vector<std::string> args = {"--master",   master_endpoint_,
                                   "--listen",   LoopbackEndpoint(port),
                                   "--memory",   spec.memory,
                                   "--disk-dir", worker_disk_dir(spec.id),
                                   "--id",       spec.id};
  if (!spec.disk_limit.empty()) {
    args.push_back("--disk-limit");
    args.push_back(spec.disk_limit);
  }
  if (keys_on()) {
    args.insert(args.end(), {"--key", SecretKeyFile(spec.id), "--master-key",
                             PublicKeyFile("master"), "--allow", keys_dir_});
  }
  args.insert(args.end(), spec.extra_args.begin(), spec.extra_args.end());
  // A worker started again under its id may still be listed from before (killed, its heartbeat
  // timeout not passed): this start is done when this process says it registered, in the part
  // of the log it appends.
  const std::string log = dir_.Sub(spec.id + ".log");
  std::error_code no_log;
  const uintmax_t log_start = std::filesystem::exists(log) ? std::filesystem::file_size(log, no_log) : 0;
  auto registered_since_start = [&] {
    std::ifstream in(log, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(log_start));
    std::stringstream appended;
    appended << in.rdbuf();
    return appended.str().find("registered with master") != std::string::npos;
  };
  slot.process = std::make_unique<Process>(Process::Start(BinaryPath("bm-worker"), args, log));
  bool up = WaitFor(
      [&] {
        if (!slot.process->Running()) return true;
        std::vector<std::string> listed = ListedWorkers();
        return std::find(listed.begin(), listed.end(), spec.id) != listed.end() &&
               registered_since_start();
      },
      kStartTimeout);
  ASSERT_TRUE(up && slot.process->Running())
      << "bm-worker " << spec.id << " did not register:\n"
      << LogTail(spec.id);
}

void LocalCluster::StartWorkers(int count, const std::string& memory) {
  for (int i = 1; i <= count; ++i) StartWorker({"w" + std::to_string(i), memory, ""});
}

void LocalCluster::SignalWorker(const std::string& id, int signal) {
  worker_process(id).Signal(signal);
}

void LocalCluster::KillWorker(const std::string& id) { worker_process(id).Kill(); }

void LocalCluster::KillMaster() { master_->Kill(); }

std::string LocalCluster::worker_endpoint(const std::string& id) const {
  return LoopbackEndpoint(workers_.at(id).port);
}

std::string LocalCluster::worker_disk_dir(const std::string& id) const {
  return dir_.Sub("disk-" + id);
}

Process& LocalCluster::worker_process(const std::string& id) {
  return *workers_.at(id).process;
}

std::vector<std::string> LocalCluster::ListedWorkers() {
  return QueryWorkers(context_, master_endpoint_, SecurityOf("admin", "master")).value_or(std::vector<std::string>{});
}

bool LocalCluster::WaitForWorkers(std::vector<std::string> ids,
                                  std::chrono::milliseconds timeout) {
  std::sort(ids.begin(), ids.end());
  return WaitFor([&] { return ListedWorkers() == ids; }, timeout);
}

CommandResult LocalCluster::Bmctl(const std::vector<std::string>& args, const std::string& input) {
  if (keys_on()) return BmctlAs("admin", args, input);
  std::vector<std::string> full = {"--master", master_endpoint_};
  full.insert(full.end(), args.begin(), args.end());
  return RunCommand(BinaryPath("bmctl"), full, input);
}

CommandResult LocalCluster::BmctlAs(const std::string& name, const std::vector<std::string>& args,
                                    const std::string& input) {
  std::vector<std::string> full = {"--master", master_endpoint_, "--key", SecretKeyFile(name),
                                   "--master-key", PublicKeyFile("master")};
  full.insert(full.end(), args.begin(), args.end());
  return RunCommand(BinaryPath("bmctl"), full, input);
}

void LocalCluster::UseKeys(const std::vector<std::string>& worker_ids) {
  keys_dir_ = dir_.Sub("keys");
  auto make = [&](const std::string& name, KeyRole role) {
    Status made = GenerateCertificate(keys_dir_, name, role);
    ASSERT_TRUE(made.ok()) << made.ToString();
  };
  make("master", KeyRole::kMaster);
  make("admin", KeyRole::kAdmin);
  make("client", KeyRole::kClient);
  for (const std::string& id : worker_ids) make(id, KeyRole::kWorker);
}

std::string LocalCluster::SecretKeyFile(const std::string& name) const {
  return keys_dir_ + "/" + name + ".key_secret";
}

std::string LocalCluster::PublicKeyFile(const std::string& name) const {
  return keys_dir_ + "/" + name + ".key";
}

ChannelSecurity LocalCluster::SecurityOf(const std::string& name,
                                         const std::string& server_name) const {
  if (!keys_on()) return {};
  Result<CurveKeys> own = LoadKeyPair(SecretKeyFile(name));
  Result<Certificate> server = LoadCertificate(PublicKeyFile(server_name));
  EXPECT_TRUE(own.ok() && server.ok()) << "keys of " << name << " / " << server_name;
  if (!own.ok() || !server.ok()) return {};
  return ChannelSecurity{*own, server->public_key};
}

nlohmann::json LocalCluster::BmctlJson(const std::vector<std::string>& args,
                                       const std::string& input) {
  std::vector<std::string> full = {"--json"};
  full.insert(full.end(), args.begin(), args.end());
  CommandResult r = Bmctl(full, input);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "bmctl " << ::testing::PrintToString(args) << " exited " << r.exit_code
                  << ": " << r.err;
    return nullptr;
  }
  nlohmann::json parsed = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) ADD_FAILURE() << "bmctl printed invalid JSON: " << r.out;
  return parsed;
}

bool LocalCluster::WorkerHolds(const std::string& worker_id, const std::string& block) {
  RpcChannel channel(context_, worker_endpoint(worker_id), std::chrono::seconds(5),
                     SecurityOf("admin", worker_id));
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().initContainsBlock().setBlockId(block);
  Result<IncomingMessage> reply = channel.Call(request);
  EXPECT_TRUE(reply.ok()) << worker_id << ": " << reply.status().ToString();
  return reply.ok() && reply->reply().getContains().getPresent();
}

std::map<std::string, std::vector<std::tuple<std::string, std::string, uint64_t>>>
LocalCluster::Locations(const std::vector<std::string>& block_ids) {
  std::vector<std::string> args = {"locations"};
  args.insert(args.end(), block_ids.begin(), block_ids.end());
  nlohmann::json j = BmctlJson(args);
  std::map<std::string, std::vector<std::tuple<std::string, std::string, uint64_t>>> out;
  if (!j.is_array()) return out;
  for (const auto& entry : j) {
    auto& locs = out[entry.at("block").get<std::string>()];
    for (const auto& l : entry.at("locations")) {
      locs.emplace_back(l.at("worker").get<std::string>(), l.at("tier").get<std::string>(),
                        l.at("size").get<uint64_t>());
    }
  }
  return out;
}

std::map<std::string, BlockCopies> LocalCluster::ListBlockCopies() {
  std::map<std::string, BlockCopies> out;
  CommandResult r = Bmctl({"--json", "blocks"});
  if (r.exit_code != 0) return out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const nlohmann::json& block : j) {
    BlockCopies& copies = out[block.at("block").get<std::string>()];
    copies.wanted = block.at("copies_wanted").get<int>();
    for (const nlohmann::json& l : block.at("locations")) {
      copies.workers.push_back(l.at("worker").get<std::string>());
    }
  }
  return out;
}

int LocalCluster::HttpPort(const std::string& name, std::chrono::milliseconds timeout) const {
  int port = 0;
  WaitFor(
      [&] {
        std::ifstream in(dir_.Sub(name + ".log"));
        std::string line;
        while (std::getline(in, line)) {
          const size_t at = line.find("(port ");
          if (line.find("http on ") != std::string::npos && at != std::string::npos) {
            port = std::atoi(line.c_str() + at + 6);
          }
        }
        return port > 0;
      },
      timeout);
  return port;
}

std::string LocalCluster::LogTail(const std::string& name) const {
  std::ifstream in(dir_.Sub(name + ".log"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

}  // namespace bm::testing
