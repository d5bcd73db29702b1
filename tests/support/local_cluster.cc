#include "tests/support/local_cluster.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace bm::testing {

LocalCluster::LocalCluster(double heartbeat_timeout_seconds)
    : processes_(ClusterOptions{.dir = dir_.path().string(),
                                .heartbeat_timeout_seconds = heartbeat_timeout_seconds}) {}

void LocalCluster::StartMaster() {
  Status started = processes_.LaunchMaster();
  if (!started.ok()) FAIL() << started.message();
}

void LocalCluster::StartWorkerBehind(const TcpProxy& proxy, WorkerSpec spec) {
  spec.port = proxy.target_port();
  spec.extra_args.push_back("--advertise");
  spec.extra_args.push_back(LoopbackEndpoint(proxy.port()));
  StartWorker(spec);
}

void LocalCluster::StartWorker(const WorkerSpec& spec) {
  Status started = processes_.LaunchWorker(spec);
  ASSERT_TRUE(started.ok()) << started.message();
}

void LocalCluster::StartWorkers(int count, const std::string& memory) {
  for (int i = 1; i <= count; ++i) StartWorker({"w" + std::to_string(i), memory, ""});
}

CommandResult LocalCluster::Bmctl(const std::vector<std::string>& args, const std::string& input) {
  if (keys_on()) return BmctlAs("admin", args, input);
  std::vector<std::string> full = {"--master", master_endpoint()};
  full.insert(full.end(), args.begin(), args.end());
  return RunCommand(BinaryPath("bmctl"), full, input);
}

CommandResult LocalCluster::BmctlAs(const std::string& name, const std::vector<std::string>& args,
                                    const std::string& input) {
  std::vector<std::string> full = {"--master",          master_endpoint(), "--key",
                                   SecretKeyFile(name), "--master-key",    PublicKeyFile("master")};
  full.insert(full.end(), args.begin(), args.end());
  return RunCommand(BinaryPath("bmctl"), full, input);
}

Status LocalCluster::CorruptCopy(const std::string& worker, const std::string& block,
                                 proto::Tier tier, uint64_t offset) {
  zmq::context_t context;
  RpcChannel channel(context, worker_endpoint(worker), std::chrono::seconds(5),
                     SecurityOf("admin", worker));
  capnp::MallocMessageBuilder request;
  proto::CorruptBlock::Builder corrupt = request.initRoot<proto::Request>().initCorruptBlock();
  corrupt.setBlockId(block);
  corrupt.setTier(tier);
  corrupt.setOffset(offset);
  return channel.Call(request).status();
}

void LocalCluster::UseKeys(const std::vector<std::string>& worker_ids) {
  Status made = processes_.MakeKeys(worker_ids);
  ASSERT_TRUE(made.ok()) << made.ToString();
}

ChannelSecurity LocalCluster::SecurityOf(const std::string& name,
                                         const std::string& server_name) const {
  Result<ChannelSecurity> security = processes_.LoadSecurity(name, server_name);
  EXPECT_TRUE(security.ok()) << "keys of " << name << " / " << server_name;
  return security.ok() ? *security : ChannelSecurity{};
}

nlohmann::json LocalCluster::BmctlJson(const std::vector<std::string>& args,
                                       const std::string& input) {
  std::vector<std::string> full = {"--json"};
  full.insert(full.end(), args.begin(), args.end());
  CommandResult r = Bmctl(full, input);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "bmctl " << ::testing::PrintToString(args) << " exited " << r.exit_code << ": "
                  << r.err;
    return nullptr;
  }
  nlohmann::json parsed = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) ADD_FAILURE() << "bmctl printed invalid JSON: " << r.out;
  return parsed;
}

bool LocalCluster::WorkerHolds(const std::string& worker_id, const std::string& block) {
  RpcChannel channel(processes_.context(), worker_endpoint(worker_id), std::chrono::seconds(5),
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

}  // namespace bm::testing
