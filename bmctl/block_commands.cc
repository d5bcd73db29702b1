// bmctl locations, blocks, verify, rm and rm-rdd: what the master knows of blocks, and the
// calls that check or remove them.

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bmctl/args.h"
#include "bmctl/commands.h"
#include "bmctl/output.h"

namespace bm {
namespace {

// bmctl locations BLOCK_ID...: which workers hold the blocks, tier, size.
class LocationsCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* locations =
        app.add_subcommand("locations", "which workers hold the blocks, tier, size");
    locations->add_option("BLOCK_ID", blocks_, "blocks to look up")->required();
    return locations;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(ids_, ParseBlockIds(blocks_));
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    Result<std::vector<BlockLocations>> found = client.Locations(ids_);
    if (!found.ok()) return Fail(found.status());
    std::cout << (output.json ? LocationsToJson(*found).dump(2) + "\n" : LocationsTable(*found));
    return FlushStdout();
  }

 private:
  std::vector<std::string> blocks_;  // parsed by CLI11
  std::vector<BlockId> ids_;         // set by Validate
};

// bmctl blocks [--rdd N | --lost]: every block (of one RDD), streamed a page at a time; or
// the blocks whose last copy was lost.
class BlocksCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* blocks = app.add_subcommand("blocks", "every block (of one RDD), or the lost ones");
    rdd_option_ = blocks->add_option("--rdd", rdd_, "only the blocks of this RDD");
    blocks
        ->add_flag("--lost", lost_,
                   "the blocks whose last copy was lost, oldest first, with when and why "
                   "(the master keeps the newest --lost-blocks-kept)")
        ->excludes(rdd_option_);
    return blocks;
  }

  Status Validate() override {
    if (rdd_option_->count() > 0) {
      BM_ASSIGN_OR_RETURN(rdd_id_, ParseUnsigned("RDD id", rdd_));
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    if (lost_) {
      Result<std::vector<LostBlockInfo>> lost = client.LostBlocks();
      if (!lost.ok()) return Fail(lost.status());
      if (output.json) {
        std::cout << LostBlocksToJson(*lost).dump(2) << "\n";
      } else {
        std::cout << LostBlocksTable(*lost);
      }
      return FlushStdout();
    }
    // Streamed a page at a time, so memory stays bounded however many blocks there are: JSON
    // as an array with one block per line, the table with its header on the first page only.
    const bool json = output.json;
    bool first = true;
    if (json) std::cout << "[";
    Status listed = client.ForEachBlockPage(rdd_id_, [&](const std::vector<BlockLocations>& page) {
      if (json) {
        for (const nlohmann::ordered_json& entry : BlocksToJson(page)) {
          std::cout << (first ? "\n" : ",\n") << entry.dump();
          first = false;
        }
      } else {
        std::string table = BlocksTable(page);
        if (!first) table.erase(0, table.find('\n') + 1);  // the header
        std::cout << table;
        first = false;
      }
      return std::cout ? Status::Ok() : InternalError("writing to stdout failed");
    });
    if (json) std::cout << (first ? "]\n" : "\n]\n");
    if (!listed.ok()) return Fail(listed);
    if (!json && first) std::cout << BlocksTable({});
    return FlushStdout();
  }

 private:
  // Parsed by CLI11.
  std::string rdd_;
  CLI::Option* rdd_option_ = nullptr;
  bool lost_ = false;
  std::optional<uint64_t> rdd_id_;  // set by Validate: all blocks when unset
};

// bmctl verify (BLOCK_ID... | --rdd N | --worker ID): the workers re-read and check every copy
// of the blocks now; exit 1 when any copy was not intact.
class VerifyCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* verify = app.add_subcommand(
        "verify",
        "have the workers re-read and check every copy of the blocks now (corrupt copies are "
        "dropped and restored from good ones); exit 1 when any copy was not intact");
    verify->add_option("BLOCK_ID", blocks_, "blocks to verify");
    rdd_option_ = verify->add_option("--rdd", rdd_, "every block of this RDD");
    worker_option_ = verify->add_option("--worker", worker_, "every block on this worker");
    return verify;
  }

  Status Validate() override {
    const bool by_rdd = rdd_option_->count() > 0;
    const bool by_worker = worker_option_->count() > 0;
    if ((blocks_.empty() ? 0 : 1) + (by_rdd ? 1 : 0) + (by_worker ? 1 : 0) != 1) {
      return InvalidArgumentError("verify takes BLOCK_ID..., --rdd N or --worker ID (one of them)");
    }
    if (!blocks_.empty()) {
      BM_ASSIGN_OR_RETURN(ids_, ParseBlockIds(blocks_));
    } else if (by_rdd) {
      BM_ASSIGN_OR_RETURN(rdd_id_, ParseUnsigned("RDD id", rdd_));
    } else if (worker_.empty()) {
      return InvalidArgumentError("--worker needs a worker id");
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    Result<std::vector<BlockLocations>> targets = Targets(client);
    if (!targets.ok()) return Fail(targets.status());
    Result<std::vector<CopyCheck>> checks = client.VerifyCopies(*targets);
    if (!checks.ok()) return Fail(checks.status());
    std::cout << (output.json ? VerifyToJson(*checks).dump(2) + "\n" : VerifyText(*checks));
    size_t bad = 0;
    for (const CopyCheck& check : *checks) bad += check.state != CopyCheck::State::kIntact;
    if (bad > 0) {
      std::cout.flush();
      std::cerr << "bmctl: " << bad << " of " << checks->size() << " copies not intact\n";
      return kExitFailure;
    }
    return FlushStdout();
  }

 private:
  // The copies to check: of the blocks named, or every block (of the RDD), only the copies on
  // the worker when one is named.
  Result<std::vector<BlockLocations>> Targets(Client& client) const {
    if (!ids_.empty()) return client.Locations(ids_);
    std::vector<BlockLocations> targets;
    Status listed = client.ForEachBlockPage(rdd_id_, [&](const std::vector<BlockLocations>& page) {
      for (const BlockLocations& block : page) {
        if (worker_.empty()) {
          targets.push_back(block);
          continue;
        }
        BlockLocations on_worker{block.block, block.level, {}};
        for (const BlockLocation& location : block.locations) {
          if (location.worker_id == worker_) on_worker.locations.push_back(location);
        }
        if (!on_worker.locations.empty()) targets.push_back(std::move(on_worker));
      }
      return Status::Ok();
    });
    if (!listed.ok()) return listed;
    return targets;
  }

  // Parsed by CLI11.
  std::vector<std::string> blocks_;
  std::string rdd_;
  std::string worker_;
  CLI::Option* rdd_option_ = nullptr;
  CLI::Option* worker_option_ = nullptr;
  // Set by Validate: the blocks named, or the RDD (unset with --worker).
  std::vector<BlockId> ids_;
  std::optional<uint64_t> rdd_id_;
};

// bmctl rm BLOCK_ID...: removes blocks everywhere.
class RmCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* rm = app.add_subcommand("rm", "remove blocks everywhere");
    rm->add_option("BLOCK_ID", blocks_, "blocks to remove")->required();
    return rm;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(ids_, ParseBlockIds(blocks_));
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    Result<uint64_t> removed = client.Remove(ids_);
    if (!removed.ok()) return Fail(removed.status());
    std::cout << (output.json ? RemovedToJson(*removed).dump(2) + "\n" : RemovedText(*removed));
    return FlushStdout();
  }

 private:
  std::vector<std::string> blocks_;  // parsed by CLI11
  std::vector<BlockId> ids_;         // set by Validate
};

// bmctl rm-rdd RDD_ID: removes every block of an RDD.
class RmRddCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* rm_rdd = app.add_subcommand("rm-rdd", "remove every block of an RDD");
    rm_rdd->add_option("RDD_ID", rdd_, "the RDD")->required();
    return rm_rdd;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(rdd_id_, ParseUnsigned("RDD id", rdd_));
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    Result<uint64_t> removed = client.RemoveRdd(rdd_id_);
    if (!removed.ok()) return Fail(removed.status());
    std::cout << (output.json ? RemovedToJson(*removed).dump(2) + "\n" : RemovedText(*removed));
    return FlushStdout();
  }

 private:
  std::string rdd_;      // parsed by CLI11
  uint64_t rdd_id_ = 0;  // set by Validate
};

}  // namespace

std::unique_ptr<BmctlCommand> MakeLocationsCommand() {
  return std::make_unique<LocationsCommand>();
}
std::unique_ptr<BmctlCommand> MakeBlocksCommand() { return std::make_unique<BlocksCommand>(); }
std::unique_ptr<BmctlCommand> MakeVerifyCommand() { return std::make_unique<VerifyCommand>(); }
std::unique_ptr<BmctlCommand> MakeRmCommand() { return std::make_unique<RmCommand>(); }
std::unique_ptr<BmctlCommand> MakeRmRddCommand() { return std::make_unique<RmRddCommand>(); }

}  // namespace bm
