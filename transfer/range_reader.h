#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "common/core/range_verifier.h"

namespace bm {

class RpcChannel;

// One block read from one worker range by range (getBlock requests of at most kMaxPieceBytes;
// PROTOCOL.md, "Reads"). Every reply is checked before any of its bytes is handed out: it must
// be the range asked for (offset, length, frames), of the same generation and size as the
// first, and its bytes must match the unit digests the worker sent with them (RangeVerifier:
// a unit split over two ranges is handed out with the range that completes it). Wrong bytes
// are never handed out. Used by a client's reads (Read, into a sink) and by block copies
// (NextRange and TakeReadyChunks, which share the received frames with the upload).
//
// Borrows the channel, which must outlive it; requests still in flight when it is destroyed
// are abandoned. Not thread-safe: the thread owning the channel uses it.
class RangeReader {
 public:
  // Receives a block's bytes in order (Client's ByteSink).
  using Sink = std::function<Status(std::span<const std::byte> bytes)>;

  // How a whole read (Read) ended.
  struct Outcome {
    // What went wrong, for the caller's choice of what to do next.
    enum class Fault {
      kNone,
      kPeer,         // the worker failed or answered wrongly (the code says how)
      kSink,         // the sink failed: its error is returned as it is
      kCorruptCopy,  // the worker's bytes did not match their unit digests (kDataLoss)
      // The unit digests the worker sent do not make the block digest given (kDataLoss): a
      // corrupt copy, unless the digest given is an older version's.
      kWrongBlockDigest,
    };
    Result<uint64_t> size;  // the block's size, or why the read stopped
    Fault fault = Fault::kNone;
    bool emitted = false;  // the sink received at least one byte
  };

  // `peer` names the worker in errors ("worker w1").
  RangeReader(RpcChannel& channel, std::string peer, const BlockId& id);
  ~RangeReader();
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;

  // Reads the whole block into `sink`, then checks that the unit digests the worker sent make
  // `block_digest`, the digest the master keeps for the block (0 = unknown: not checked). A
  // worker whose digest metadata itself is wrong passes every unit check of its own bytes;
  // this catches it.
  Outcome Read(const Sink& sink, uint64_t block_digest);

  // Reads and checks the next range; its verified bytes are then in ready().
  Status NextRange();
  // True once every byte of the block was received.
  bool done() const { return generation_.has_value() && offset_ == total_; }
  // The verified bytes of the last NextRange, in order; valid until the next call.
  const std::vector<std::span<const std::byte>>& ready() const;
  // ready() as chunks: slices of the received frames, which they keep alive (no copy), and a
  // copy only of the bytes of a unit held back from an earlier range (less than a unit).
  std::vector<ChunkPtr> TakeReadyChunks();

  // The block's size and version, known after the first NextRange.
  uint64_t total() const { return total_; }
  uint64_t version() const { return version_; }

 private:
  // Asks for the range at asked_end_.
  Status Ask();
  // Receives and checks the next range: the first unit whose bytes do not match its digest
  // (none of the range is then handed out), nullopt when all match, or an error when the
  // worker failed or answered wrongly.
  Result<std::optional<uint64_t>> ReceiveRange();
  // Records the unit digests of the range at `offset`.
  void RecordUnitDigests(uint64_t offset, const std::vector<uint64_t>& units);
  // The block digest made by the unit digests recorded, when every unit's was; 0 otherwise.
  uint64_t SentBlockDigest() const;

  // A range asked for and not yet received.
  struct Asked {
    uint64_t request;
    uint64_t offset;
  };

  RpcChannel& channel_;
  const std::string peer_;
  const std::string block_;
  std::deque<Asked> asked_;             // oldest first
  uint64_t asked_end_ = 0;              // where the next range to ask for starts
  uint64_t offset_ = 0;                 // of the next byte to receive
  std::optional<uint64_t> generation_;  // of the first reply
  uint64_t total_ = 0;
  uint64_t version_ = 0;
  std::optional<RangeVerifier> verifier_;
  std::vector<ChunkPtr> frames_;  // of the last range
  // The unit digests the worker sent, by unit (0 = none sent).
  std::vector<uint64_t> unit_digests_;
};

}  // namespace bm
