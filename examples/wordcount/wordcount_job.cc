#include "examples/wordcount/wordcount_job.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "blockmgr/dataset.h"
#include "examples/wordcount/text_splits.h"

namespace bm::wordcount {

std::string DatasetName(const std::string& input) {
  return "wordcount:" + std::filesystem::path(input).filename().string();
}

namespace {

// Blocks are found by RDD id and partition only, so cached counts of another input, or of the
// same input cut differently, would be read as this one's. The description an earlier run
// registered tells: refuse to mix them up.
Status CheckCacheIsOurs(CacheSession& session, const WordCountOptions& options) {
  BM_ASSIGN_OR_RETURN(std::vector<RddInfo> rdds,
                      session.WithClient([](Client& client) { return client.Rdds(); }));
  const std::string name = DatasetName(options.input);
  for (const RddInfo& rdd : rdds) {
    if (rdd.rdd_id != options.rdd_id || rdd.cached_partitions == 0 || rdd.name.empty()) continue;
    if (rdd.name != name || rdd.total_partitions != options.partitions) {
      return InvalidArgumentError("RDD " + std::to_string(rdd.rdd_id) + " already caches " +
                                  rdd.name + " in " + std::to_string(rdd.total_partitions) +
                                  " partitions; remove it (bm-wordcount " + "unpersist --rdd-id " +
                                  std::to_string(rdd.rdd_id) + ") or choose another --rdd-id");
    }
  }
  return Status::Ok();
}

// The reduce side through a shuffle: map i sends reducer r the counts of its words that are
// r's; reducer r merges what every map sent it. The reducers' words are disjoint, so their
// counts together are the file's.
Result<WordCounts> ReduceThroughShuffle(Client& client, const std::vector<WordCounts>& maps,
                                        uint32_t reducers, StorageLevel level) {
  std::random_device random;
  const uint64_t shuffle_id = ((uint64_t{random()} << 32) | random()) >> 2;
  BM_RETURN_IF_ERROR(
      client
          .RegisterShuffle({.id = shuffle_id,
                            .maps = static_cast<uint32_t>(maps.size()),
                            .partitions = reducers,
                            .level = ReplicationOf(level) > 1 ? StorageLevel::kMemoryOnly2
                                                              : StorageLevel::kMemoryOnly})
          .status());
  for (uint32_t map = 0; map < maps.size(); ++map) {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleWriter> writer,
                        client.OpenShuffleWriter(shuffle_id, map, /*attempt=*/0));
    std::vector<WordCounts> parts = maps[map].SplitByWord(reducers);
    for (uint32_t reducer = 0; reducer < reducers; ++reducer) {
      if (parts[reducer].distinct() == 0) continue;
      BM_RETURN_IF_ERROR(writer->Write(reducer, parts[reducer].Encode()));
    }
    BM_RETURN_IF_ERROR(writer->Commit());
  }
  WordCounts total;
  for (uint32_t reducer = 0; reducer < reducers; ++reducer) {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleReader> reader,
                        client.OpenShuffleReader(shuffle_id, reducer));
    // A map's encoded counts may arrive in several pieces: whole per map before decoding.
    std::map<uint32_t, std::vector<std::byte>> by_map;
    BM_RETURN_IF_ERROR(reader->ForEach([&](uint32_t map, std::span<const std::byte> piece) {
      by_map[map].insert(by_map[map].end(), piece.begin(), piece.end());
      return Status::Ok();
    }));
    for (const auto& [map, bytes] : by_map) {
      BM_ASSIGN_OR_RETURN(WordCounts counts, WordCounts::Decode(bytes));
      total.Merge(counts);
    }
  }
  BM_RETURN_IF_ERROR(client.UnregisterShuffle(shuffle_id));
  return total;
}

}  // namespace

Result<WordCountRun> RunWordCount(const WordCountOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  BM_ASSIGN_OR_RETURN(std::unique_ptr<TextSplits> splits,
                      TextSplits::Open(options.input, options.partitions));

  ClientOptions client_options{.master_address = options.master_address};
  client_options.zookeeper = options.zookeeper;
  client_options.key_file = options.key_file;
  client_options.master_key_file = options.master_key_file;
  auto session = std::make_shared<CacheSession>(client_options);
  // The lines dataset is never persisted, so its id names no blocks; it only has to differ
  // from the counts dataset's.
  auto lines = Dataset::Source(session, options.rdd_id + 1, "lines", options.partitions,
                               [&splits](uint32_t i) { return splits->Read(i); });
  auto counts = lines->Map(options.rdd_id, DatasetName(options.input),
                           [](uint32_t, std::span<const std::byte> text) -> Result<PartitionData> {
                             return WordCounts::Count(text).Encode();
                           });
  BM_RETURN_IF_ERROR(CheckCacheIsOurs(*session, options));
  BM_RETURN_IF_ERROR(counts->Persist(options.level));
  BM_ASSIGN_OR_RETURN(std::vector<PartitionData> partitions, counts->Collect(options.parallelism));

  WordCountRun run;
  run.partitions = options.partitions;
  run.reducers = options.reducers;
  std::vector<WordCounts> maps;
  for (uint32_t i = 0; i < partitions.size(); ++i) {
    Result<WordCounts> decoded = WordCounts::Decode(partitions[i]);
    if (!decoded.ok()) {
      return InternalError("partition " + std::to_string(i) + " of RDD " +
                           std::to_string(options.rdd_id) + ": " + decoded.status().message());
    }
    if (options.reducers == 0) {
      run.counts.Merge(*decoded);
    } else {
      maps.push_back(std::move(*decoded));
    }
  }
  if (options.reducers > 0) {
    BM_ASSIGN_OR_RETURN(run.counts, session->WithClient([&](Client& client) {
      return ReduceThroughShuffle(client, maps, options.reducers, options.level);
    }));
  }
  run.cache = session->counters();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return run;
}

std::string ChecksumLine(const WordCounts& counts) {
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(counts.Digest()));
  return "total_words=" + std::to_string(counts.total()) +
         " distinct=" + std::to_string(counts.distinct()) + " digest=" + digest;
}

std::string SummaryLine(const WordCountRun& run) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", run.seconds);
  return "partitions=" + std::to_string(run.partitions) +
         " computed=" + std::to_string(run.cache.computes) +
         " hits=" + std::to_string(run.cache.hits()) + " seconds=" + seconds +
         (run.reducers > 0 ? " reducers=" + std::to_string(run.reducers) : std::string());
}

}  // namespace bm::wordcount
