#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/types.h"

namespace zmq {
class socket_t;
}

namespace bm {

class IncomingMessage;
class LocationCache;
class WorkerChannels;

// Client::GetMany's reads: getBlocks requests (a multi-get of up to kGetBlocksBatchBytes of
// small blocks each) to each block's worker (this host's copy first, else the first listed),
// all in flight together. Remembered locations are read at once; the others are looked up in
// a few growing chunks, each chunk's reads sent as soon as its locations arrive, so the
// workers serve one chunk while the master answers the next. A block the multi-get cannot
// return (too big for a reply, moved, corrupt, or its worker failed) is read alone through
// the client, which falls over to other locations. Blocks come as views of the frames they
// arrived in, checked against their digests; no copy.
//
// Owns one DEALER socket per worker address, apart from the WorkerChannels' RpcChannels so
// that replies to its batches never meet RpcChannel's one-call-at-a-time matching; each is
// made with the key the master vouched for and made again when that key changes. Borrows the
// channels, the location cache and the counters of its Client, which must outlive it. Not
// thread-safe: owned by one Client.
class MultiGet {
 public:
  // What a multi-get asks of the client it serves.
  class Reads {
   public:
    virtual ~Reads() = default;
    // The master's locations of `ids`, one entry per id.
    virtual Result<std::vector<BlockLocations>> Locations(const std::vector<BlockId>& ids) = 0;
    // Reads one block alone, falling over to other locations.
    virtual Result<std::vector<std::byte>> Get(const BlockId& id) = 0;
    virtual bool IsLocalAddress(const std::string& address) const = 0;
  };

  MultiGet(WorkerChannels& channels, LocationCache& location_cache, CacheCounters& counters);
  ~MultiGet();
  MultiGet(const MultiGet&) = delete;
  MultiGet& operator=(const MultiGet&) = delete;

  // One result per id, in order (Client::GetManyChunks).
  std::vector<Result<BlockData>> Read(const std::vector<BlockId>& ids, Reads& reads);

  // How many of indexes[start...] one getBlocks asks for: up to kMaxGetBlocksIds ids and
  // kGetBlocksBatchBytes of expected bytes (`sizes`, by index), at least one id.
  static size_t BatchLength(const std::vector<size_t>& indexes, size_t start,
                            const std::vector<uint64_t>& sizes);

 private:
  // A getBlocks request in flight: to which worker, for which of the call's ids.
  struct PendingBatch {
    std::string address;
    std::vector<size_t> indexes;  // into the call's ids
  };
  // The state of one Read.
  struct Call {
    const std::vector<BlockId>& ids;
    std::vector<Result<BlockData>> out;
    std::vector<uint64_t> sizes;                 // as the master last reported them
    std::map<uint64_t, PendingBatch> in_flight;  // by request id
    std::vector<size_t> retry;                   // ids to read alone
  };
  // A worker's DEALER and the key it was made with.
  struct Pipeline {
    std::string key;
    std::unique_ptr<zmq::socket_t> socket;
  };

  // The DEALER to `address`, made with the key the channels trust for it; null when there is
  // none (no vouched key, or an address ZeroMQ cannot connect to).
  zmq::socket_t* PipelineTo(const std::string& address);
  // Sends the reads of each worker's ids, in getBlocks batches, without waiting for any reply;
  // the ids it could not send go to `retry`.
  void SendBatches(const std::map<std::string, std::vector<size_t>>& by_worker, Call& call);
  // Takes the replies in flight as they come, up to the request timeout.
  void AwaitBatches(Call& call);
  // Takes one getBlocks reply into the call (stale ones are dropped).
  void TakeBatchReply(IncomingMessage& message, Call& call);

  WorkerChannels& channels_;
  LocationCache& location_cache_;
  CacheCounters& counters_;
  std::map<std::string, Pipeline> pipelines_;  // by worker address
  uint64_t next_request_id_ = 1;
};

}  // namespace bm
