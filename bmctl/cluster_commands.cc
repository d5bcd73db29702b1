// bmctl workers, rdds and decommission: the cluster's workers and cached RDDs, and draining a
// worker.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bmctl/commands.h"
#include "bmctl/output.h"

namespace bm {
namespace {

// bmctl workers [--watch]: live workers, memory and disk use; with --watch redrawn every second
// (JSON documents one after another with --json) until interrupted.
class WorkersCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* workers = app.add_subcommand("workers", "live workers, memory and disk use");
    workers->add_flag("--watch", watch_, "redraw the list every second until interrupted");
    return workers;
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    if (watch_) return Watch(client, output.json);
    Result<std::vector<WorkerInfo>> list = client.Workers();
    if (!list.ok()) return Fail(list.status());
    std::cout << (output.json ? WorkersToJson(*list).dump(2) + "\n" : WorkersTable(*list));
    return FlushStdout();
  }

 private:
  static int Watch(Client& client, bool json) {
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    while (true) {
      Result<std::vector<WorkerInfo>> list = client.Workers();
      std::string text;
      if (json) {
        text = list.ok() ? WorkersToJson(*list).dump() + "\n"
                         : nlohmann::json{{"error", list.status().ToString()}}.dump() + "\n";
      } else {
        const std::time_t now = std::time(nullptr);
        char when[32];
        std::strftime(when, sizeof(when), "%H:%M:%S", std::localtime(&now));
        text = std::string("Every 1 s: bmctl workers  (") + when + ")\n\n" +
               (list.ok() ? WorkersTable(*list) : "bmctl: " + list.status().ToString() + "\n");
        // Home the cursor and clear the screen, as watch(1) does.
        if (terminal) text = "\x1b[H\x1b[2J" + text;
      }
      std::cout << text;
      std::cout.flush();
      if (!std::cout) return Fail(InternalError("writing to stdout failed"));
      // A display refresh, not a wait for some condition.
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }

  bool watch_ = false;  // parsed by CLI11
};

// bmctl rdds: cached RDDs, partitions, bytes, workers.
class RddsCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    return app.add_subcommand("rdds", "cached RDDs: partitions, bytes, workers");
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    Result<std::vector<RddInfo>> list = client.Rdds();
    if (!list.ok()) return Fail(list.status());
    std::cout << (output.json ? RddsToJson(*list).dump(2) + "\n" : RddsTable(*list));
    return FlushStdout();
  }
};

// bmctl decommission WORKER_ID [--wait S]: starts the drain, then follows it until the master
// no longer lists the worker.
class DecommissionCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* decommission = app.add_subcommand(
        "decommission",
        "drain a worker: it takes no new blocks, its blocks are copied to other workers, then it "
        "exits; waits until it is gone");
    decommission->add_option("WORKER_ID", worker_, "the worker")->required();
    decommission
        ->add_option("--wait", wait_seconds_,
                     "give up waiting after this many seconds (the drain goes on)")
        ->check(CLI::Range(0, 86400));
    return decommission;
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    const bool json = output.json;
    if (Status started = client.Decommission(worker_); !started.ok()) return Fail(started);
    if (!json) std::cerr << "decommissioning " << worker_ << "\n";
    const std::chrono::seconds wait(wait_seconds_);
    const auto deadline = std::chrono::steady_clock::now() + wait;
    uint64_t last_blocks = UINT64_MAX;
    while (true) {
      Result<std::vector<WorkerInfo>> workers = client.Workers();
      if (!workers.ok()) return Fail(workers.status());
      auto it = std::find_if(workers->begin(), workers->end(),
                             [&](const WorkerInfo& w) { return w.id == worker_; });
      if (it == workers->end()) break;
      if (!json && it->block_count != last_blocks) {
        std::cerr << "  " << worker_ << " still holds " << it->block_count << " blocks\n";
        last_blocks = it->block_count;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Fail(UnavailableError("worker " + worker_ + " is still draining after " +
                                     std::to_string(wait.count()) + " s; the drain goes on"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling a remote state
    }
    if (json) {
      std::cout << nlohmann::json{{"decommissioned", worker_}}.dump(2) << "\n";
    } else {
      std::cout << "decommissioned " << worker_ << "\n";
    }
    return kExitSuccess;
  }

 private:
  // Parsed by CLI11.
  std::string worker_;
  int wait_seconds_ = 600;
};

// bmctl masters: each master, leader or standby, its epoch and journal position.
class MastersCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    return app.add_subcommand(
        "masters",
        "each master (those --master lists, and with --zookeeper every master standing in the "
        "election): leader or standby, epoch, journal");
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    const std::vector<MasterInfo> masters = client.Masters();
    const bool some_leader = std::any_of(masters.begin(), masters.end(), [](const MasterInfo& m) {
      return m.error.empty() && m.leader;
    });
    if (output.json) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (const MasterInfo& m : masters) {
        nlohmann::ordered_json entry{{"address", m.address}};
        if (!m.error.empty()) {
          entry["error"] = m.error;
        } else {
          entry["id"] = m.id;
          entry["role"] = m.leader ? "leader" : "standby";
          entry["epoch"] = m.epoch;
          entry["leader_address"] = m.leader_address;
          entry["journal_sequence"] = m.journal_sequence;
          entry["in_sync"] = m.in_sync;
        }
        list.push_back(std::move(entry));
      }
      std::cout << list.dump(2) << "\n";
    } else {
      std::cout << "ADDRESS                        ID          ROLE     EPOCH  JOURNAL  IN-SYNC\n";
      for (const MasterInfo& m : masters) {
        char line[512];
        if (!m.error.empty()) {
          std::snprintf(line, sizeof(line), "%-30s %s\n", m.address.c_str(), m.error.c_str());
        } else {
          std::snprintf(line, sizeof(line), "%-30s %-11s %-8s %5llu  %7llu  %s\n",
                        m.address.c_str(), m.id.empty() ? "-" : m.id.c_str(),
                        m.leader ? "leader" : "standby", static_cast<unsigned long long>(m.epoch),
                        static_cast<unsigned long long>(m.journal_sequence),
                        m.leader ? "-" : (m.in_sync ? "yes" : "no"));
        }
        std::cout << line;
      }
    }
    if (int flushed = FlushStdout(); flushed != 0) return flushed;
    if (!some_leader) return Fail(UnavailableError("no master answered as the leader"));
    return 0;
  }
};

}  // namespace

std::unique_ptr<BmctlCommand> MakeMastersCommand() { return std::make_unique<MastersCommand>(); }
std::unique_ptr<BmctlCommand> MakeWorkersCommand() { return std::make_unique<WorkersCommand>(); }
std::unique_ptr<BmctlCommand> MakeRddsCommand() { return std::make_unique<RddsCommand>(); }
std::unique_ptr<BmctlCommand> MakeDecommissionCommand() {
  return std::make_unique<DecommissionCommand>();
}

}  // namespace bm
