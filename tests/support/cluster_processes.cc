#include "tests/support/cluster_processes.h"

#include <capnp/message.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/cluster_keys.h"

namespace bm::testing {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(30);
// Starts of a server whose port may be taken between choosing and binding it.
constexpr int kStartAttempts = 5;

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

bool Contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

ClusterProcesses::ClusterProcesses(ClusterOptions options) : options_(std::move(options)) {}

ClusterProcesses::~ClusterProcesses() {
  for (auto& [id, slot] : workers_) {
    if (slot.process) slot.process->Kill();
  }
  if (master_) master_->Kill();
}

Status ClusterProcesses::MakeKeys(const std::vector<std::string>& worker_ids) {
  keys_dir_ = FilePath("keys");
  std::filesystem::remove_all(keys_dir_);
  return GenerateClusterKeys(keys_dir_, worker_ids);
}

std::string ClusterProcesses::SecretKeyFile(const std::string& name) const {
  return keys_dir_ + "/" + name + ".key_secret";
}

std::string ClusterProcesses::PublicKeyFile(const std::string& name) const {
  return keys_dir_ + "/" + name + ".key";
}

Result<ChannelSecurity> ClusterProcesses::LoadSecurity(const std::string& name,
                                                       const std::string& server_name) const {
  if (!keys_on()) return ChannelSecurity{};
  BM_ASSIGN_OR_RETURN(CurveKeys own, LoadKeyPair(SecretKeyFile(name)));
  BM_ASSIGN_OR_RETURN(Certificate server, LoadCertificate(PublicKeyFile(server_name)));
  return ChannelSecurity{own, server.public_key};
}

ClientOptions ClusterProcesses::ClientOptionsFor(const std::string& key_name) const {
  ClientOptions options;
  options.master_address = master_endpoint_;
  if (keys_on()) {
    options.key_file = SecretKeyFile(key_name);
    options.master_key_file = PublicKeyFile("master");
  }
  return options;
}

Status ClusterProcesses::LaunchMaster() {
  BM_ASSIGN_OR_RETURN(const ChannelSecurity admin, LoadSecurity("admin", "master"));
  // A restart reuses the endpoint, since running workers know the master by it.
  const bool restart = !master_endpoint_.empty();
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    if (!restart) master_endpoint_ = LoopbackEndpoint(FreeLoopbackPort());
    std::vector<std::string> args = {"--listen", master_endpoint_, "--heartbeat-timeout",
                                     std::to_string(options_.heartbeat_timeout_seconds)};
    if (!master_state_dir_.empty()) {
      args.push_back("--state-dir");
      args.push_back(master_state_dir_);
    }
    if (keys_on()) {
      args.insert(args.end(), {"--key", SecretKeyFile("master"), "--allow", keys_dir_});
    }
    args.insert(args.end(), master_extra_args_.begin(), master_extra_args_.end());
    const std::string http_address = FreeHttpAddress();
    BM_ASSIGN_OR_RETURN(
        Process process,
        Process::Spawn(ServerBinary("bm-master"), WithServerArgs(std::move(args), http_address),
                       LogPath("master")));
    master_ = std::make_unique<Process>(std::move(process));
    const bool up = WaitFor(
        [&] {
          return !master_->Running() || QueryWorkers(context_, master_endpoint_, admin).has_value();
        },
        kStartTimeout);
    if (up && master_->Running()) {
      master_http_ = http_address.empty() ? "" : "http://" + http_address;
      return Status::Ok();
    }
  }
  return UnavailableError("bm-master did not start:\n" + LogTail("master"));
}

Status ClusterProcesses::LaunchWorker(const WorkerSpec& spec) {
  BM_ASSIGN_OR_RETURN(const ChannelSecurity admin, LoadSecurity("admin", "master"));
  // A worker restarted under its id keeps its port, since the master lists it by its address.
  auto it = workers_.find(spec.id);
  const int fixed_port = it != workers_.end() ? it->second.port : spec.port;
  // A worker started again under its id may still be listed from before (killed, its heartbeat
  // timeout not passed): this start is done when this process says it registered, in the part
  // of the log it appends.
  const bool listed_before = Contains(ListedWorkers(), spec.id);
  const std::string log = LogPath(spec.id);
  std::error_code no_log;
  const uintmax_t log_start =
      std::filesystem::exists(log) ? std::filesystem::file_size(log, no_log) : 0;
  auto registered_since_start = [&] {
    std::ifstream in(log, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(log_start));
    std::stringstream appended;
    appended << in.rdbuf();
    return appended.str().find("registered with master") != std::string::npos;
  };
  WorkerSlot& slot = workers_[spec.id];
  slot.spec = spec;
  for (int attempt = 0; attempt < (fixed_port != 0 ? 1 : kStartAttempts); ++attempt) {
    slot.port = fixed_port != 0 ? fixed_port : FreeLoopbackPort();
    std::vector<std::string> args = {
        "--master", master_endpoint_, "--listen",   LoopbackEndpoint(slot.port),
        "--memory", spec.memory,      "--disk-dir", worker_disk_dir(spec.id),
        "--id",     spec.id};
    if (!spec.disk_limit.empty()) {
      args.push_back("--disk-limit");
      args.push_back(spec.disk_limit);
    }
    if (keys_on()) {
      args.insert(args.end(), {"--key", SecretKeyFile(spec.id), "--master-key",
                               PublicKeyFile("master"), "--allow", keys_dir_});
    }
    args.insert(args.end(), spec.extra_args.begin(), spec.extra_args.end());
    const std::string http_address = FreeHttpAddress();
    BM_ASSIGN_OR_RETURN(
        Process process,
        Process::Spawn(spec.binary.empty() ? ServerBinary("bm-worker") : spec.binary,
                       WithServerArgs(std::move(args), http_address), log));
    slot.process = std::make_unique<Process>(std::move(process));
    const bool up = WaitFor(
        [&] {
          if (!slot.process->Running()) return true;
          return Contains(QueryWorkers(context_, master_endpoint_, admin)
                              .value_or(std::vector<std::string>{}),
                          spec.id) &&
                 (!listed_before || registered_since_start());
        },
        kStartTimeout);
    if (up && slot.process->Running()) {
      slot.http = http_address.empty() ? "" : "http://" + http_address;
      return Status::Ok();
    }
  }
  return UnavailableError("bm-worker " + spec.id + " did not register:\n" + LogTail(spec.id));
}

void ClusterProcesses::SignalWorker(const std::string& id, int signal) {
  worker_process(id).Signal(signal);
}

void ClusterProcesses::KillWorker(const std::string& id) { worker_process(id).Kill(); }

void ClusterProcesses::KillMaster() { master_->Kill(); }

std::string ClusterProcesses::worker_endpoint(const std::string& id) const {
  return LoopbackEndpoint(workers_.at(id).port);
}

std::string ClusterProcesses::worker_disk_dir(const std::string& id) const {
  return FilePath("disk-" + id);
}

Process& ClusterProcesses::worker_process(const std::string& id) {
  return *workers_.at(id).process;
}

const Process& ClusterProcesses::worker_process(const std::string& id) const {
  return *workers_.at(id).process;
}

const std::string& ClusterProcesses::worker_http(const std::string& id) const {
  return workers_.at(id).http;
}

std::vector<std::string> ClusterProcesses::ListedWorkers() {
  Result<ChannelSecurity> admin = LoadSecurity("admin", "master");
  if (!admin.ok()) return {};
  return QueryWorkers(context_, master_endpoint_, *admin).value_or(std::vector<std::string>{});
}

bool ClusterProcesses::WaitForWorkers(std::vector<std::string> ids,
                                      std::chrono::milliseconds timeout) {
  std::sort(ids.begin(), ids.end());
  return WaitFor([&] { return ListedWorkers() == ids; }, timeout);
}

int ClusterProcesses::HttpPort(const std::string& name, std::chrono::milliseconds timeout) const {
  int port = 0;
  WaitFor(
      [&] {
        std::ifstream in(LogPath(name));
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

std::string ClusterProcesses::LogPath(const std::string& name) const {
  return FilePath(name + ".log");
}

std::string ClusterProcesses::LogTail(const std::string& name) const {
  std::ifstream in(LogPath(name));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

std::string ClusterProcesses::FilePath(const std::string& name) const {
  return options_.dir + "/" + options_.file_prefix + name;
}

std::string ClusterProcesses::ServerBinary(const std::string& name) const {
  return options_.bin_dir.empty() ? BinaryPath(name) : options_.bin_dir + "/" + name;
}

std::string ClusterProcesses::FreeHttpAddress() const {
  return options_.http ? "127.0.0.1:" + std::to_string(FreeLoopbackPort()) : "";
}

std::vector<std::string> ClusterProcesses::WithServerArgs(std::vector<std::string> args,
                                                          const std::string& http_address) const {
  args.insert(args.end(), options_.server_args.begin(), options_.server_args.end());
  if (!http_address.empty()) args.insert(args.end(), {"--http", http_address});
  return args;
}

}  // namespace bm::testing
