#pragma once

// The word count as two datasets over a text file:
//   lines  (source)  partition i = the lines of byte range i of the file (text_splits.h);
//                    never persisted, so reading it is the expensive part of a recompute
//   counts (map)     partition i = the word counts of lines partition i, encoded compactly;
//                    persisted, so later runs read it from the cache instead of recomputing
// Collecting `counts` and merging its partitions gives the file's word counts. A partition
// lost with its worker is recomputed from `lines`, so every run gives the same counts.

#include <cstddef>
#include <cstdint>
#include <string>

#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"
#include "examples/wordcount/word_counts.h"

namespace bm::wordcount {

struct WordCountOptions {
  std::string master_address;
  // Or the ZooKeeper the masters are elected through (ClientOptions::zookeeper).
  std::string zookeeper;
  // Keys for a cluster that runs with them (ClientOptions::key_file / master_key_file).
  std::string key_file;
  std::string master_key_file;
  std::string input;
  uint32_t partitions = 16;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  // Names the cached blocks (rdd_<id>_<partition>): the same across runs, so a run finds what
  // an earlier one cached.
  uint64_t rdd_id = 100;
  size_t parallelism = 0;  // partitions fetched or computed at once; 0 = one per core
  // 0: the partitions' counts are merged in this process. N: they go through a shuffle of N
  // reduce partitions (README "Shuffles"): each map sends each reducer the counts of its words,
  // and each reducer merges the counts of the words that are its own.
  uint32_t reducers = 0;
};

// What one run found and what caching did for it.
struct WordCountRun {
  uint32_t partitions = 0;
  WordCounts counts;
  CacheCounters cache;
  double seconds = 0;     // wall time of the whole run, connecting included
  uint32_t reducers = 0;  // as WordCountOptions::reducers
};

// The name the counts dataset is registered under: "wordcount:<input file name>".
std::string DatasetName(const std::string& input);

// Counts the words of options.input, reading cached partitions and computing (then caching)
// the others. Fails (kInvalidArgument) when options.rdd_id caches the counts of a file of
// another name or cut into another number of partitions. A file changed under the same name
// is not detected: unpersist its counts first.
Result<WordCountRun> RunWordCount(const WordCountOptions& options);

// "total_words=T distinct=D digest=<16 hex digits>": equal across runs exactly when the merged
// counts are.
std::string ChecksumLine(const WordCounts& counts);
// "partitions=N computed=C hits=H seconds=S": what caching bought this run.
std::string SummaryLine(const WordCountRun& run);

}  // namespace bm::wordcount
