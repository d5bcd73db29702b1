// bmctl shuffles, shuffle ID and rm-shuffle ID: the shuffles the cluster runs, where each
// partition lives and what is committed to it (README "Shuffles").

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bmctl/commands.h"
#include "bmctl/output.h"
#include "common/core/byte_size.h"

namespace bm {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json SummaryToJson(const ShuffleSummary& shuffle) {
  return {{"shuffle_id", shuffle.spec.id},
          {"maps", shuffle.spec.maps},
          {"partitions", shuffle.spec.partitions},
          {"level", std::string(StorageLevelName(shuffle.spec.level))},
          {"committed_maps", shuffle.committed_maps},
          {"bytes", shuffle.bytes},
          {"workers", shuffle.workers},
          {"idle_ms", shuffle.idle_ms}};
}

// bmctl shuffles: one line per shuffle.
class ShufflesCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    return app.add_subcommand("shuffles", "shuffles: shape, level, committed maps, bytes, workers");
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    Result<std::vector<ShuffleSummary>> list = client.Shuffles();
    if (!list.ok()) return Fail(list.status());
    if (output.json) {
      ordered_json out = ordered_json::array();
      for (const ShuffleSummary& shuffle : *list) out.push_back(SummaryToJson(shuffle));
      std::cout << out.dump(2) << "\n";
      return FlushStdout();
    }
    std::vector<std::vector<std::string>> rows;
    for (const ShuffleSummary& shuffle : *list) {
      rows.push_back({std::to_string(shuffle.spec.id), std::to_string(shuffle.spec.maps),
                      std::to_string(shuffle.spec.partitions),
                      std::string(StorageLevelName(shuffle.spec.level)),
                      std::to_string(shuffle.committed_maps), FormatBytes(shuffle.bytes),
                      std::to_string(shuffle.workers.size()),
                      std::to_string(shuffle.idle_ms / 1000) + " s"});
    }
    std::cout << FormatTable({{"SHUFFLE", true},
                              {"MAPS", true},
                              {"PARTITIONS", true},
                              {"LEVEL"},
                              {"COMMITTED", true},
                              {"BYTES", true},
                              {"WORKERS", true},
                              {"IDLE", true}},
                             rows);
    return FlushStdout();
  }
};

// bmctl shuffle ID: each partition's workers, and the committed maps' pieces and bytes in it.
class ShowShuffleCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* command = app.add_subcommand(
        "shuffle", "one shuffle: each partition's workers, committed pieces and bytes");
    command->add_option("shuffle_id", shuffle_id_, "The shuffle's id")->required();
    return command;
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    Result<ShuffleLayout> layout = client.ShuffleLayoutOf(shuffle_id_);
    if (!layout.ok()) return Fail(layout.status());
    ordered_json partitions = ordered_json::array();
    std::vector<std::vector<std::string>> rows;
    for (uint32_t partition = 0; partition < layout->spec.partitions; ++partition) {
      Result<ShuffleLayout> with_commits = client.ShuffleLayoutOf(shuffle_id_, partition);
      if (!with_commits.ok()) return Fail(with_commits.status());
      uint64_t pieces = 0;
      uint64_t bytes = 0;
      for (const ShuffleLayout::Commit& commit : with_commits->commits) {
        pieces += commit.pieces;
        bytes += commit.bytes;
      }
      const std::string primary = layout->workers[layout->primaries[partition]].worker_id;
      const std::string replica =
          layout->replicas.empty() ? "" : layout->workers[layout->replicas[partition]].worker_id;
      // A partition past the split size goes on in more streams, on other workers.
      ordered_json streams = ordered_json::array();
      const std::vector<ShuffleLayout::Stream> in_order = layout->StreamsOf(partition);
      for (const ShuffleLayout::Stream& stream : in_order) {
        streams.push_back(
            {{"stream", stream.stream},
             {"primary", layout->workers[stream.primary].worker_id},
             {"replica", stream.replica ? layout->workers[*stream.replica].worker_id : ""}});
      }
      partitions.push_back({{"partition", partition},
                            {"primary", primary},
                            {"replica", replica},
                            {"pieces", pieces},
                            {"bytes", bytes},
                            {"streams", streams}});
      rows.push_back({std::to_string(partition), primary, replica.empty() ? "-" : replica,
                      std::to_string(in_order.size()), std::to_string(pieces), FormatBytes(bytes)});
    }
    if (output.json) {
      ordered_json out = {{"shuffle_id", layout->spec.id},
                          {"maps", layout->spec.maps},
                          {"partitions", layout->spec.partitions},
                          {"level", std::string(StorageLevelName(layout->spec.level))},
                          {"committed_maps", layout->committed_maps},
                          {"partition_list", partitions}};
      std::cout << out.dump(2) << "\n";
      return FlushStdout();
    }
    std::cout << "shuffle " << layout->spec.id << ": " << layout->spec.maps << " maps x "
              << layout->spec.partitions << " partitions, " << StorageLevelName(layout->spec.level)
              << ", " << layout->committed_maps << " maps committed\n"
              << FormatTable({{"PARTITION", true},
                              {"PRIMARY"},
                              {"REPLICA"},
                              {"STREAMS", true},
                              {"PIECES", true},
                              {"BYTES", true}},
                             rows);
    return FlushStdout();
  }

 private:
  uint64_t shuffle_id_ = 0;  // parsed by CLI11
};

// bmctl rm-shuffle ID: the shuffle and its data everywhere.
class RmShuffleCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* command =
        app.add_subcommand("rm-shuffle", "remove a shuffle and its data on every worker");
    command->add_option("shuffle_id", shuffle_id_, "The shuffle's id")->required();
    return command;
  }

  Status Validate() override { return Status::Ok(); }

  int Run(Client& client, const OutputOptions& output) override {
    if (Status removed = client.UnregisterShuffle(shuffle_id_); !removed.ok()) {
      return Fail(removed);
    }
    if (output.json) {
      std::cout << ordered_json{{"removed_shuffle", shuffle_id_}}.dump(2) << "\n";
    } else {
      std::cout << "removed shuffle " << shuffle_id_ << "\n";
    }
    return FlushStdout();
  }

 private:
  uint64_t shuffle_id_ = 0;
};

}  // namespace

std::unique_ptr<BmctlCommand> MakeShufflesCommand() { return std::make_unique<ShufflesCommand>(); }
std::unique_ptr<BmctlCommand> MakeShuffleCommand() {
  return std::make_unique<ShowShuffleCommand>();
}
std::unique_ptr<BmctlCommand> MakeRmShuffleCommand() {
  return std::make_unique<RmShuffleCommand>();
}

}  // namespace bm
