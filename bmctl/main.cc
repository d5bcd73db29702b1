// bmctl: the operator's command line for a blockmgr cluster, built on bm::Client.
// Exit codes: 0 success; 1 operational failure (one line on stderr); 2 usage error; 3 a put
// refused for its tenant's quota (kExitQuotaExceeded).
//
// Main sets up the options every command shares, parses, and hands over to the parsed command
// (bmctl/commands.h), which checks its own arguments and runs.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "bmctl/args.h"
#include "bmctl/command.h"
#include "bmctl/commands.h"
#include "bmctl/progress_line.h"
#include "common/core/allocator.h"
#include "common/net/master_addresses.h"
#include "common/zookeeper/zookeeper_session.h"

namespace bm {
namespace {

int UsageError(const std::string& message) {
  std::cerr << "bmctl: " << message << " (see bmctl --help)\n";
  return kExitUsage;
}

// The options every command shares: where the master is, the keys, the reply timeout, and how
// to print. Bound to the app before parsing, checked after.
class GlobalOptions {
 public:
  void AddTo(CLI::App& app) {
    // Required by every command but keygen (checked after parsing).
    app.add_option("--master", master_,
                   "the master's address, tcp://HOST:PORT, or every master's, comma-separated "
                   "(default: $BLOCKMGR_MASTER)")
        ->envname("BLOCKMGR_MASTER");
    app.add_option("--zookeeper", zookeeper_,
                   "HOST:PORT[,HOST:PORT...][/CHROOT] of the ZooKeeper the masters are elected "
                   "through: the leader it names is asked (default: $BLOCKMGR_ZOOKEEPER)")
        ->envname("BLOCKMGR_ZOOKEEPER");
    app.add_flag("--progress", progress_on_,
                 "show a progress line on stderr for put and get (default: for transfers of 64 "
                 "MiB or more when stderr is a terminal)");
    app.add_flag("--no-progress", progress_off_, "never show a progress line");
    app.add_option("--key", key_file_,
                   "this user's secret certificate (NAME.key_secret) for a cluster with keys")
        ->envname("BLOCKMGR_KEY");
    app.add_option("--master-key", master_key_file_, "the master's public certificate (MASTER.key)")
        ->envname("BLOCKMGR_MASTER_KEY");
    app.add_flag("--json", json_, "print JSON for scripts instead of tables");
    app.add_option("--timeout", timeout_, "seconds to wait for each reply (default 5)");
    app.add_flag("--no-local-reads", no_local_reads_,
                 "read every block over TCP, even from a worker on this host (default: map it "
                 "from shared memory; README \"Same-host reads\")")
        ->envname("BLOCKMGR_NO_LOCAL_READS");
  }

  // How to reach the master, or why the options do not say.
  Result<ClientOptions> MakeClientOptions() const {
    if (master_.empty() && zookeeper_.empty()) {
      return InvalidArgumentError("--master or --zookeeper is required");
    }
    if (!master_.empty()) BM_RETURN_IF_ERROR(MasterAddresses::ValidateConnectable(master_));
    if (!zookeeper_.empty()) {
      if (Status s = ParseZooKeeperAddress(zookeeper_).status(); !s.ok()) {
        return InvalidArgumentError("--zookeeper: " + s.message());
      }
    }
    if (key_file_.empty() != master_key_file_.empty()) {
      return InvalidArgumentError(
          "--key and --master-key go together (or BLOCKMGR_KEY and BLOCKMGR_MASTER_KEY)");
    }
    BM_ASSIGN_OR_RETURN(std::chrono::milliseconds request_timeout, ParseTimeout(timeout_));
    ClientOptions options{master_, request_timeout};
    options.zookeeper = zookeeper_;
    options.key_file = key_file_;
    options.master_key_file = master_key_file_;
    options.local_reads = !no_local_reads_;
    return options;
  }

  Result<OutputOptions> MakeOutputOptions() const {
    if (progress_on_ && progress_off_) {
      return InvalidArgumentError("--progress and --no-progress contradict");
    }
    const ProgressMode progress = progress_on_    ? ProgressMode::kOn
                                  : progress_off_ ? ProgressMode::kOff
                                                  : ProgressMode::kAuto;
    return OutputOptions{json_, progress};
  }

 private:
  std::string master_;
  std::string zookeeper_;
  std::string key_file_;
  std::string master_key_file_;
  std::string timeout_ = "5";
  bool json_ = false;
  bool progress_on_ = false;
  bool progress_off_ = false;
  bool no_local_reads_ = false;
};

int Main(int argc, char** argv) {
  CLI::App app{"Put, get, locate and remove blocks in a blockmgr cluster.", "bmctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the command
  app.footer(
      "Exit codes: 0 success, 1 operational failure (not found, master unreachable, out of "
      "space), 2 usage error, 3 quota exceeded (a put refused for its tenant's quota).");
  GlobalOptions global;
  global.AddTo(app);
  const std::vector<std::unique_ptr<BmctlCommand>> commands = MakeBmctlCommands();
  std::vector<CLI::App*> subcommands;
  for (const std::unique_ptr<BmctlCommand>& command : commands) {
    subcommands.push_back(command->AddTo(app));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return UsageError(e.what());
  }
  BmctlCommand* command = nullptr;
  for (size_t i = 0; i < commands.size(); ++i) {
    if (subcommands[i]->parsed()) command = commands[i].get();
  }
  BM_CHECK(command != nullptr);  // require_subcommand(1)

  if (!command->NeedsMaster()) {
    if (Status valid = command->Validate(); !valid.ok()) return UsageError(valid.message());
    return command->RunLocally();
  }
  // Every argument is checked before the master is contacted.
  Result<ClientOptions> client_options = global.MakeClientOptions();
  if (!client_options.ok()) return UsageError(client_options.status().message());
  if (Status valid = command->Validate(); !valid.ok()) return UsageError(valid.message());
  Result<OutputOptions> output = global.MakeOutputOptions();
  if (!output.ok()) return UsageError(output.status().message());
  Client client(*client_options);
  return command->Run(client, *output);
}

}  // namespace
}  // namespace bm

int main(int argc, char** argv) {
  bm::TuneAllocatorForBlockBuffers();
  // stdout carries blocks (get) and tables: the client library's warnings go to stderr.
  auto logger = spdlog::stderr_color_mt("bmctl");
  logger->set_pattern("bmctl: %v");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  // While ZooKeeper cannot be reached its client logs every attempt to reconnect; bmctl's one
  // line of error says so already.
  bm::SetZooKeeperClientLog(spdlog::level::debug);
  return bm::Main(argc, argv);
}
