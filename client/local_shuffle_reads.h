#pragma once

// A shuffle stream read through the local-read socket of a worker on this host (docs/storage.md
// "Same-host reads", schema/local_reads.capnp readShuffle): the pages the worker would send
// over TCP, their pieces' bytes in the reply's trailer or in a region or partition file this
// side maps. Internal to the client library.

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "blockmgr/status.h"
#include "schema/messages.capnp.h"

namespace bm {

class LocalReadConnection;

// What a reader asks of one stream of a shuffle partition, page by page, over either path.
struct ShuffleStreamAsk {
  uint64_t shuffle_id = 0;
  uint32_t stream = 0;
  uint32_t max_bytes = 0;
  std::vector<std::pair<uint32_t, uint32_t>> commits;  // (map, its committed attempt)

  // The readShuffle request for the page starting at `cursor`.
  void Fill(proto::ReadShuffle::Builder read, uint64_t cursor) const;
};

// A piece as a page lists it (ReadPiece); its bytes come beside it.
struct ShufflePieceHeader {
  uint32_t map = 0;
  uint32_t sequence = 0;
  uint64_t digest = 0;
};

// Takes each piece of a stream in order, its bytes valid during the call; an error stops the
// read and is returned as it is.
using ShufflePieceSink =
    std::function<Status(const ShufflePieceHeader& piece, std::span<const std::byte> bytes)>;

// Reads the stream `ask` names from its start through `connection`, one page asked ahead of the
// one handed to `sink` (the worker prepares the next while this one is visited). The bytes are
// not copied on this side: they view the packet that carried them, or a read-only mapping of
// the page's region or partition file, unmapped once the page is done. The worker's errors come
// back as it sent them; kUnavailable when the connection failed (broken() from then on).
Status ReadShuffleStreamLocally(LocalReadConnection& connection, const ShuffleStreamAsk& ask,
                                const ShufflePieceSink& sink);

}  // namespace bm
