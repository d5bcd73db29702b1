#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "common/security/tenant.h"
#include "master/block_index.h"
#include "master/lost_blocks.h"
#include "master/shuffle_service.h"
#include "master/tenant_registry.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace bm {

// A worker as the journal remembers it: enough to reach it and show it before it registers
// again after a master restart.
struct JournaledWorker {
  std::string id;
  std::string address;
  std::string host;  // placement labels; empty = none
  std::string rack;
  // The CURVE key it authenticated with (Z85), so a restarted master vouches for it to clients
  // (and reaches it) before it registers again; empty with keys off.
  std::string public_key{};

  bool operator==(const JournaledWorker&) const = default;
};

// What a dataset registered about an RDD (registerRdd).
struct JournaledRdd {
  uint64_t rdd_id = 0;
  std::string name;
  StorageLevel level = StorageLevel::kMemoryOnly;
  uint64_t total_partitions = 0;

  bool operator==(const JournaledRdd&) const = default;
};

// A compute lease as journaled (ComputeLeases::HeldLease).
struct JournaledLease {
  BlockId block;
  uint64_t token = 0;
  std::string holder;
  uint64_t length_ms = 0;
  bool operator==(const JournaledLease&) const = default;
};

// Everything Load() found except the block locations, which are streamed (there may be
// millions). Both sorted: workers by id, RDDs by id.
struct JournalSnapshot {
  std::vector<JournaledWorker> workers;
  std::vector<JournaledRdd> rdds;
  uint64_t location_count = 0;
  // Versions retired by removals (RecordRetired), oldest first.
  std::vector<std::pair<BlockId, uint64_t>> retired;
  // Compute leases held when the journal was last written.
  std::vector<JournaledLease> leases;
  // Dataset owners and shares, and tenant quotas (master/tenant_registry.h), by name.
  std::vector<std::pair<std::string, DatasetAccess>> datasets;
  std::vector<std::pair<std::string, TenantQuota>> quotas;
  // Blocks whose last copy was lost (RecordLost), in no particular order: LostBlocks::Restore
  // orders them.
  std::vector<LostRecord> lost;
  // Registered shuffles, and the committed map attempts (each after its shuffle), by id.
  std::vector<JournaledShuffle> shuffles;
  std::vector<JournaledMapCommit> map_commits;
};

// The master's metadata on disk (bm-master --state-dir): the registered workers, every block
// location they reported, and the RDD descriptions, in RocksDB, so a restarted master answers
// from where it stopped while its workers register again.
//
// Each Record* call is one atomic RocksDB write batch, written to the WAL without fsync: it
// survives the master process being killed (the OS keeps the WAL), not a machine crash. That
// is enough: after a machine crash the workers re-register with full reports anyway.
//
// The journal follows the master's in-memory state, which stays the truth while the master
// runs; a failed write is the caller's to log and count.
//
// Not thread-safe: owned by the master's event loop. RocksDB's lock file keeps a second master
// from opening the same directory.
class MasterJournal {
 public:
  // Creates `dir` (and its parents) if missing. kUnavailable when another process holds the
  // journal open, kInvalidArgument when the directory cannot be created or opened.
  static Result<std::unique_ptr<MasterJournal>> Open(const std::string& dir);
  ~MasterJournal();
  MasterJournal(const MasterJournal&) = delete;
  MasterJournal& operator=(const MasterJournal&) = delete;

  // Reads everything back: returns the workers and RDDs, and calls `on_location` for each
  // block location, grouped by worker. kInternal naming the key when a value is corrupt.
  // Locations of a worker with no worker record cannot happen (they are written and deleted in
  // the same batches) and are skipped with a warning.
  using LocationSink = std::function<void(const std::string& worker_id, const BlockChange&)>;
  Result<JournalSnapshot> Load(const LocationSink& on_location);

  // A worker registered with a full report: replaces its record and all its old locations.
  Status RecordRegistration(const JournaledWorker& worker, std::span<const BlockChange> blocks);
  // A worker's reported changes (or confirmed removals), in order.
  Status RecordChanges(std::string_view worker_id, std::span<const BlockChange> changes);
  // The worker was dropped: its record and its locations go.
  Status RecordWorkerDropped(std::string_view worker_id);
  Status RecordRdd(const JournaledRdd& rdd);
  Status RecordRddForgotten(uint64_t rdd_id);
  // Block versions a removal retired (BlockIndex::RetireVersions), so that a worker away during
  // the removal whose copies come back after a master restart has them refused, as the master's
  // version history refuses them while it runs. Keeps the last kMaxRetired, as the history
  // keeps a bounded number of ids.
  Status RecordRetired(std::span<const std::pair<BlockId, uint64_t>> retired);
  static constexpr uint64_t kMaxRetired = uint64_t{1} << 18;
  // Compute leases granted (or handed over) and ended, in one write: a standby that takes over
  // knows who computes what, so get-or-compute stays exactly-once across a failover.
  Status RecordLeases(std::span<const JournaledLease> held, std::span<const BlockId> ended);
  // The records of lost blocks written and forgotten (LostBlocks' changes), in one write.
  Status RecordLost(const LostBlocks::Changes& changes);

  // What ShuffleService recorded: shuffles registered (replacing their records), map attempts
  // committed and shuffles forgotten (with their commits), in one write.
  Status RecordShuffles(const ShuffleEffects& effects);

  // A dataset's owner and shares (TenantRegistry), replacing its record.
  Status RecordDataset(const std::string& dataset, const DatasetAccess& access);
  // A tenant's quotas set, or (nullopt) removed.
  Status RecordQuota(const std::string& tenant, const std::optional<TenantQuota>& quota);

  const std::string& dir() const { return dir_; }

  // ---- Standby masters (PROTOCOL.md, "Standby masters") ----

  // Called with every write batch this journal writes (RocksDB's WriteBatch::Data()), after it
  // was written, so the leader can feed it to its standbys. Empty = none.
  using WriteObserver = std::function<void(std::string_view batch)>;
  void set_write_observer(WriteObserver observer) { write_observer_ = std::move(observer); }

  // Where a standby's journal stands in its leader's records: the next record of `epoch`.
  struct FollowPosition {
    uint64_t epoch = 0;
    uint64_t sequence = 0;
    bool operator==(const FollowPosition&) const = default;
  };
  // The position stored by the last ApplyFollowed; {0, 0} when none (a fresh journal, or one
  // written by a leader).
  Result<FollowPosition> ReadFollowPosition();
  // What a standby applies: records that follow its position, or a page of a snapshot.
  enum class FollowedPart {
    kRecords,        // the next records after its position
    kSnapshotStart,  // the first page of a snapshot: the journal's records are deleted first
    kSnapshotMore,   // a later page of the snapshot
  };
  // A standby applies its leader's batches, in order, each atomically with the position after
  // it; the last batch carries `position` (for a snapshot page before the last, {0, 0}: a
  // standby that stops midway starts the snapshot over). kInvalidArgument when a batch is not
  // a RocksDB batch of puts and deletes; nothing is applied then.
  Status ApplyFollowed(std::span<const std::string_view> batches, FollowedPart part,
                       FollowPosition position);

  // A page of the whole journal (every record but the format and the follow position) in key
  // order, from the record after key `after` (empty: the first), as write batches of about
  // `batch_bytes` each, at most `max_batches` of them: what a standby too far behind the
  // leader's recent records rebuilds its journal from, a page per fetch. `next` is the last
  // key the page holds while more follow, empty once it reached the end.
  struct SnapshotPage {
    std::vector<std::string> batches;
    std::string next;
  };
  Result<SnapshotPage> ReadSnapshotPage(std::string_view after, size_t batch_bytes,
                                        size_t max_batches);
  // Every page at once (for tests and small journals).
  Result<std::vector<std::string>> SnapshotBatches(size_t batch_bytes);

 private:
  // Writes `batch` and tells the write observer.
  Status Write(rocksdb::WriteBatch& batch, const std::string& what);
  MasterJournal(std::string dir, std::unique_ptr<rocksdb::DB> db);
  Status CheckFormat();

  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  // Sequence numbers of the retired-version records kept: [first, next). Set by Load().
  uint64_t first_retired_seq_ = 0;
  uint64_t next_retired_seq_ = 0;
  WriteObserver write_observer_;
};

}  // namespace bm
