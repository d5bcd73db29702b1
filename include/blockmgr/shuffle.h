#pragma once

// Shuffles (README "Shuffles", PROTOCOL.md "Shuffles"): map tasks push their output, cut by
// reduce partition, into partition streams the workers keep; each reduce task reads its
// partition as one stream. Obtained from a Client (blockmgr/client.h), which must outlive them;
// like the Client, not thread-safe.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"

namespace bm {

// A shuffle's shape: maps 0..maps-1 write into partitions 0..partitions-1. The _2 levels keep
// every partition on two workers (on two hosts when there are).
struct ShuffleSpec {
  uint64_t id = 0;
  uint32_t maps = 0;
  uint32_t partitions = 0;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
};

struct ShuffleWorker {
  std::string worker_id;
  std::string address;     // empty when the master no longer lists the worker
  std::string public_key;  // empty with keys off
};

// Where a registered shuffle's partitions live, as the master assigned them.
struct ShuffleLayout {
  ShuffleSpec spec;
  std::vector<ShuffleWorker> workers;
  std::vector<uint32_t> primaries;  // partition -> index into workers
  std::vector<uint32_t> replicas;   // partition -> index into workers; empty for one copy
  // Partitions continued past the split size (README "Shuffles"): stream `stream` holds the
  // partition's pieces after the streams before it, on workers[primary] (and workers[replica]
  // for two copies). A partition's first stream has its own id.
  struct Split {
    uint32_t stream = 0;
    uint32_t partition = 0;
    uint32_t primary = 0;
    uint32_t replica = 0;
  };
  std::vector<Split> splits;
  uint32_t committed_maps = 0;
  // With a partition asked for (the reader's): the committed attempt of each committed map and
  // how many pieces (bytes) it wrote into that partition, in all and per stream.
  struct StreamPieces {
    uint32_t stream = 0;
    uint32_t pieces = 0;
    uint64_t bytes = 0;
  };
  struct Commit {
    uint32_t map = 0;
    uint32_t attempt = 0;
    uint32_t pieces = 0;
    uint64_t bytes = 0;
    std::vector<StreamPieces> streams{};
  };
  std::vector<Commit> commits;

  // One stream of a partition and the workers holding it.
  struct Stream {
    uint32_t stream = 0;
    uint32_t primary = 0;
    std::optional<uint32_t> replica{};
  };
  // The streams of `partition` in order.
  std::vector<Stream> StreamsOf(uint32_t partition) const;
};

// A shuffle as `bmctl shuffles` lists it.
struct ShuffleSummary {
  ShuffleSpec spec;
  uint32_t committed_maps = 0;
  uint64_t bytes = 0;  // committed, one copy
  std::vector<std::string> workers;
  uint64_t idle_ms = 0;
};

struct ShuffleWriterOptions {
  // A partition's bytes are cut into pieces of at most this size.
  size_t max_piece_bytes = size_t{1} << 20;
  // Pieces for one worker are pushed together once they add up to this much.
  size_t batch_bytes = size_t{1} << 20;
  // Pushes awaiting their acknowledgement per worker.
  size_t max_in_flight = 4;
  // How long a push may keep being refused as unavailable (the worker's shuffle memory is
  // full, or it has not been told of the shuffle yet) before the writer gives up.
  std::chrono::milliseconds retry_for{30000};
};

// Writes one attempt of one map task: Write() the bytes of each partition (in any order, as
// often as wanted: a partition's writes are one stream), then Commit(). Bytes are buffered and
// pushed in batches, one per worker, several in flight; a push is acknowledged once the worker
// holds it (for _2 levels the partition's primary forwards it to the replica and acknowledges
// once both hold it). Until Commit() succeeds nothing of this attempt is
// ever read; after it, exactly this attempt's bytes are the map's output, whatever other
// attempts of the map (retried or speculative tasks) push or commit.
class ShuffleWriter {
 public:
  class Impl;
  explicit ShuffleWriter(std::unique_ptr<Impl> impl);
  ~ShuffleWriter();
  ShuffleWriter(const ShuffleWriter&) = delete;
  ShuffleWriter& operator=(const ShuffleWriter&) = delete;

  // Appends `bytes` (copied) to this map's output for `partition`. Fails with the error of a
  // push that failed (the attempt is then lost: run the map again as a new attempt).
  Status Write(uint32_t partition, std::span<const std::byte> bytes);
  // Pushes everything written and waits for every acknowledgement.
  Status Flush();
  // Flush(), then records the attempt as the map's output. kAborted when another attempt of
  // the map committed first (its output stands; this one's is never read).
  Status Commit();

  uint64_t bytes_written() const;
  uint64_t pushes() const;  // push requests sent, retries included

 private:
  std::unique_ptr<Impl> impl_;
};

// Reads one reduce partition: the pieces of every committed map, each once, with its map id,
// checked against its digest, from the partition's primary worker and, should it fail, from
// the replica (_2 levels).
class ShuffleReader {
 public:
  class Impl;
  explicit ShuffleReader(std::unique_ptr<Impl> impl);
  ~ShuffleReader();
  ShuffleReader(const ShuffleReader&) = delete;
  ShuffleReader& operator=(const ShuffleReader&) = delete;

  // Calls `visit` with each piece, its bytes valid during the call only (zero-copy from the
  // reply that carried them). An error `visit` returns stops the read and is returned.
  // kDataLoss when pieces of committed maps are gone from every copy: missing_maps() names
  // those maps, whose tasks must run again (Spark's FetchFailed).
  using Visit = std::function<Status(uint32_t map, std::span<const std::byte> bytes)>;
  Status ForEach(const Visit& visit);
  // Every piece's bytes, concatenated, in stream order (for small partitions and tests).
  Result<std::vector<std::byte>> ReadAll();

  const std::vector<uint32_t>& missing_maps() const;
  uint64_t bytes_read() const;
  uint32_t partition() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bm
