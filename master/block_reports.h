#pragma once

// A worker's blocks taken into the BlockIndex under its version rules: the full list a worker
// registers with, and the changes of a block report. The index changes here; what else that
// comes to (journal records, copies to remove, copies to verify) is returned for the master's
// loop to carry out, so that these rules are tested without sockets or a journal.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "master/block_index.h"

namespace bm {

// A copy reported with a digest other than its version's: the index does not list it; its
// worker is to verify it (verifyBlock), which drops it if its bytes do not match its own
// digests.
struct MismatchedCopy {
  BlockChange change;
  uint64_t expected_digest = 0;  // the version's
};

// What applying a worker's blocks came to, for the loop to carry out in this order: the
// mismatched copies (each journaled as removed: the index dropped any location the worker had
// for the block), the record of `journaled` (a registration: of `recorded`), the removals of
// `replaced`, then the removal of `stale` from the worker.
struct AppliedBlocks {
  std::vector<BlockChange> recorded;  // the index lists them now
  // Of `recorded`, what changed the index (a report's): a removal of a copy the index no
  // longer lists (a version replaced since) is not journaled, as its journal record would
  // delete the newer copy's location.
  std::vector<BlockChange> journaled;
  // Copies of older versions on other workers that the recorded fresh versions replaced:
  // dropped from the index, not removed from their workers yet.
  std::vector<RetiredCopy> replaced;
  // Copies of versions replaced or removed (or stored under a lease no longer held): refused,
  // to be removed from the worker.
  std::vector<RetiredCopy> stale;
  // A report's fresh puts refused because their compute lease is no longer held: the worker
  // fails them.
  std::vector<BlockChange> refused;
  std::vector<MismatchedCopy> mismatched;
  std::vector<GoneBlock> gone;  // a report's: blocks whose last location a removal dropped
};

// Whether `lease` (a compute lease's token) still holds the lease on the block.
using LeaseHeld = std::function<bool(const BlockId& block, uint64_t lease)>;

// What a registering worker holds (its old locations already dropped): copies of versions
// replaced or removed while it was away are stale.
AppliedBlocks ApplyRegistration(BlockIndex& index, const std::string& worker_id,
                                const std::vector<BlockChange>& blocks);

// A block report's changes. A fresh block stored under a compute lease (BlockChange::lease) is
// refused unless the lease is still held, or the block's current version is this one (another
// copy of the same put ended the lease): a holder that stalled past its lease must not store a
// second computed version after another client's.
AppliedBlocks ApplyReport(BlockIndex& index, const std::string& worker_id,
                          const std::vector<BlockChange>& changes, const LeaseHeld& lease_held);

}  // namespace bm
