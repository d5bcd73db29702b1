#include "master/journal.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <unordered_set>

#include "common/core/big_endian.h"
#include "common/core/protocol.h"
#include "common/security/curve_keys.h"
#include "master/shuffle_requests.h"  // EncodeSplits
#include "schema/journal.capnp.h"

namespace bm {
namespace {

// Key layout (default column family):
//   "f"                                      -> format version (one byte)
//   "w" + worker id                          -> JournalWorker (schema/journal.capnp)
//   "l" + varint(len(worker id)) + worker id + block id -> location value, below
//   "r" + be64(rdd id)                       -> JournalRdd
//   "v" + be64(sequence number)              -> be64(version) + block id: a retired version
//   "m" + block id                           -> JournalLost: a block whose last copy was lost
// Locations sort by worker, then block: one worker's are one contiguous range, so dropping or
// re-registering a worker is one DeleteRange. The length prefix keeps the worker part
// prefix-free (worker "w1" never captures the locations of worker "w10"). Block ids are their
// text form ("rdd_7_12"): as short as a binary form for typical ids, and readable in ldb.
//
// A location value is 1 byte (bit 0 tier, bits 1-3 level, bits 4-7 zero) and the size as a
// varint (1-10 bytes): 4 bytes for a 1 MiB block; then the block's version (BlockChange::version)
// as 8 bytes big-endian, absent when 0 (and in journals written before versions); then the
// copy's block digest (BlockChange::digest) as 8 bytes big-endian, absent when 0 (and in
// journals written before digests were journaled; the version is then written even when 0).
constexpr std::string_view kFormatKey = "f";
constexpr char kFormatVersion = 1;
constexpr std::string_view kWorkerPrefix = "w";
constexpr std::string_view kLocationPrefix = "l";
constexpr std::string_view kRddPrefix = "r";
constexpr std::string_view kRetiredPrefix = "v";
// "o" + dataset name -> JournalDataset: its owner and shares.
constexpr std::string_view kDatasetPrefix = "o";
// "q" + tenant name -> JournalQuota.
constexpr std::string_view kQuotaPrefix = "q";
// "p" + block id text -> be64(token) + be64(length ms) + holder: a compute lease held.
constexpr std::string_view kLeasePrefix = "p";
// "m" + block id text -> JournalLost: a block whose last copy was lost.
constexpr std::string_view kLostPrefix = "m";
// "u" + be64(shuffle id) -> JournalShuffle: a registered shuffle and its placement;
// "u" + be64(shuffle id) + be64(map) -> JournalMapCommit: the map's committed attempt.
// A shuffle's records are one range, so forgetting it is one DeleteRange.
constexpr std::string_view kShufflePrefix = "u";
// A standby's position in its leader's records: be64(epoch) + be64(next sequence).
constexpr std::string_view kFollowKey = "s";
// Every record a snapshot carries (and a snapshot's receiver deletes first): the prefixes
// above, which sort between these two keys ("l" < "o" < "p" < "q" < "r" < "u" < "v" < "w").
constexpr std::string_view kRecordsBegin = "l";
constexpr std::string_view kRecordsEnd = "x";
constexpr int kLevelCount = 6;

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNoSpace()) return OutOfSpaceError(what + ": disk full: " + s.ToString());
  return InternalError(what + ": " + s.ToString());
}

void PutVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Reads a varint from the front of `in` and advances it; nullopt when malformed or cut short.
std::optional<uint64_t> GetVarint(std::string_view& in) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return value;
  }
  return std::nullopt;
}

std::string WorkerKey(std::string_view worker_id) {
  std::string key(kWorkerPrefix);
  key += worker_id;
  return key;
}

std::string LocationPrefix(std::string_view worker_id) {
  std::string key(kLocationPrefix);
  PutVarint(key, worker_id.size());
  key += worker_id;
  return key;
}

// Just past every location key of the worker: block ids are ASCII, so below 0xff.
std::string LocationPrefixEnd(std::string_view worker_id) {
  return LocationPrefix(worker_id) + '\xff';
}

std::string LocationKey(std::string_view worker_id, const BlockId& block) {
  return LocationPrefix(worker_id) + block.ToString();
}

std::string RetiredKey(uint64_t seq) {
  std::string key(kRetiredPrefix);
  PutBigEndian(key, seq);
  return key;
}

std::string ShuffleKey(uint64_t shuffle_id) {
  std::string key(kShufflePrefix);
  PutBigEndian(key, shuffle_id);
  return key;
}

std::string MapCommitKey(uint64_t shuffle_id, uint32_t map) {
  std::string key = ShuffleKey(shuffle_id);
  PutBigEndian(key, map);
  return key;
}

std::string RddKey(uint64_t rdd_id) {
  std::string key(kRddPrefix);
  PutBigEndian(key, rdd_id);
  return key;
}

std::string EncodeLocation(const BlockChange& change) {
  std::string out;
  out.push_back(static_cast<char>((change.tier == Tier::kDisk ? 1 : 0) |
                                  (static_cast<int>(change.level) << 1)));
  PutVarint(out, change.size);
  if (change.version != 0 || change.digest != 0) PutBigEndian(out, change.version);
  if (change.digest != 0) PutBigEndian(out, change.digest);
  return out;
}

std::optional<BlockChange> DecodeLocation(const BlockId& id, std::string_view value) {
  if (value.empty()) return std::nullopt;
  const uint8_t head = static_cast<uint8_t>(value.front());
  value.remove_prefix(1);
  const int level = (head >> 1) & 0x7;
  if ((head >> 4) != 0 || level >= kLevelCount) return std::nullopt;
  std::optional<uint64_t> size = GetVarint(value);
  if (!size || (value.size() != 0 && value.size() != 8 && value.size() != 16)) return std::nullopt;
  BlockChange change{id};
  if (!value.empty()) change.version = GetBigEndian(value);
  if (value.size() == 16) change.digest = GetBigEndian(value.substr(8));
  change.tier = (head & 1) ? Tier::kDisk : Tier::kMemory;
  change.level = static_cast<StorageLevel>(level);
  change.size = *size;
  return change;
}

// Splits a location key into worker id and block id text; nullopt when malformed.
std::optional<std::pair<std::string, std::string_view>> SplitLocationKey(std::string_view key) {
  key.remove_prefix(kLocationPrefix.size());
  std::optional<uint64_t> length = GetVarint(key);
  if (!length || *length >= key.size()) return std::nullopt;
  return std::make_pair(std::string(key.substr(0, *length)), key.substr(*length));
}

std::string Flatten(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const char> bytes = words.asChars();
  return std::string(bytes.begin(), bytes.size());
}

// Decodes a Cap'n Proto value (copied into aligned words first) with `read`; false when the
// value is not a valid message.
template <typename Root, typename F>
bool ReadValue(std::string_view value, F&& read) {
  if (value.empty() || value.size() % sizeof(capnp::word) != 0) return false;
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(value.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), value.data(), value.size());
  try {
    capnp::FlatArrayMessageReader reader(words);
    read(reader.getRoot<Root>());
    return true;
  } catch (const kj::Exception&) {
    return false;
  }
}

std::string Printable(std::string_view key) {
  std::string out;
  for (char c : key.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<uint8_t>(c));
      out += hex;
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<MasterJournal>> MasterJournal::Open(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("the master journal directory is empty");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return InvalidArgumentError("cannot create the master journal directory " + dir + ": " +
                                error.message());
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  // Small values and a few writes per request: modest buffers, few files, a short info log.
  options.write_buffer_size = 32 << 20;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 4 << 20;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    const std::string text = s.ToString();
    if (s.IsIOError() && text.find("lock") != std::string::npos) {
      return UnavailableError("the master journal " + dir +
                              " is in use by another process (is another bm-master using this "
                              "--state-dir?): " +
                              text);
    }
    return InvalidArgumentError("cannot open the master journal " + dir + ": " + text);
  }
  std::unique_ptr<MasterJournal> journal(new MasterJournal(dir, std::unique_ptr<rocksdb::DB>(raw)));
  BM_RETURN_IF_ERROR(journal->CheckFormat());
  return journal;
}

MasterJournal::MasterJournal(std::string dir, std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)), db_(std::move(db)) {}

MasterJournal::~MasterJournal() = default;

Status MasterJournal::CheckFormat() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kFormatKey, &value);
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    BM_RETURN_IF_ERROR(FromRocks(it->status(), "reading the master journal " + dir_));
    if (it->Valid()) {
      return InternalError("the master journal " + dir_ +
                           " has data but no format version: not a blockmgr master journal?");
    }
    return FromRocks(
        db_->Put(rocksdb::WriteOptions(), kFormatKey, std::string_view(&kFormatVersion, 1)),
        "initialising the master journal " + dir_);
  }
  BM_RETURN_IF_ERROR(FromRocks(s, "reading the master journal " + dir_));
  if (value != std::string_view(&kFormatVersion, 1)) {
    return InternalError("the master journal " + dir_ + " has an unknown format version (" +
                         Printable(value) + "); it was written by another blockmgr version");
  }
  return Status::Ok();
}

namespace {

// Reads the records under one key prefix in key order, for Load. `read(key, value)` takes each
// into the snapshot; an error it returns says what was bad, and Each names the key and the
// journal around it.
class RecordScan {
 public:
  RecordScan(rocksdb::DB& db, const std::string& dir) : dir_(dir) {
    rocksdb::ReadOptions options;
    options.fill_cache = false;  // read once, at start-up
    it_.reset(db.NewIterator(options));
  }

  template <typename Read>
  Status Each(std::string_view prefix, std::string_view what, Read&& read) {
    for (it_->Seek(prefix); it_->Valid() && it_->key().starts_with(prefix); it_->Next()) {
      const std::string_view key = it_->key().ToStringView();
      if (Status taken = read(key, it_->value().ToStringView()); !taken.ok()) {
        return InternalError("the master journal " + dir_ + " is corrupt: " + taken.message() +
                             " at key '" + Printable(key) + "'");
      }
    }
    return FromRocks(it_->status(),
                     "reading " + std::string(what) + " from the master journal " + dir_);
  }

 private:
  const std::string& dir_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

Status Bad(std::string_view what) { return InternalError(std::string(what)); }

Result<JournaledWorker> DecodeWorker(std::string_view key, std::string_view value) {
  JournaledWorker worker;
  worker.id = std::string(key.substr(kWorkerPrefix.size()));
  const bool ok = ReadValue<journal::JournalWorker>(value, [&](journal::JournalWorker::Reader r) {
    worker.address = r.getAddress();
    worker.host = r.getHost();
    worker.rack = r.getRack();
    worker.public_key = r.getPublicKey();
  });
  if (!ok || worker.id.empty() || worker.address.empty() ||
      (!worker.public_key.empty() && !IsZ85Key(worker.public_key))) {
    return Bad("a bad worker record");
  }
  return worker;
}

Result<JournaledRdd> DecodeRdd(std::string_view key, std::string_view value) {
  if (key.size() != kRddPrefix.size() + 8) return Bad("a bad RDD key");
  JournaledRdd rdd;
  rdd.rdd_id = GetBigEndian(key.substr(kRddPrefix.size()));
  bool level_ok = true;
  const bool ok = ReadValue<journal::JournalRdd>(value, [&](journal::JournalRdd::Reader r) {
    rdd.name = r.getName();
    level_ok = static_cast<int>(r.getLevel()) < kLevelCount;
    rdd.level = FromProto(r.getLevel());
    rdd.total_partitions = r.getTotalPartitions();
  });
  if (!ok || !level_ok) return Bad("a bad RDD description");
  return rdd;
}

// A retired version: its record's sequence number and the version.
struct RetiredRecord {
  uint64_t seq;
  std::pair<BlockId, uint64_t> version;
};

Result<RetiredRecord> DecodeRetired(std::string_view key, std::string_view value) {
  if (key.size() != kRetiredPrefix.size() + 8 || value.size() <= 8) {
    return Bad("a bad retired version");
  }
  Result<BlockId> id = BlockId::Parse(value.substr(8));
  if (!id.ok()) return Bad("a bad block id in a retired version");
  return RetiredRecord{GetBigEndian(key.substr(kRetiredPrefix.size())),
                       {*id, GetBigEndian(value.substr(0, 8))}};
}

Result<JournaledLease> DecodeLease(std::string_view key, std::string_view value) {
  Result<BlockId> id = BlockId::Parse(key.substr(kLeasePrefix.size()));
  if (!id.ok() || value.size() < 16) return Bad("a bad compute lease");
  return JournaledLease{*id, GetBigEndian(value), std::string(value.substr(16)),
                        GetBigEndian(value.substr(8))};
}

Result<std::pair<std::string, DatasetAccess>> DecodeDataset(std::string_view key,
                                                            std::string_view value) {
  DatasetAccess access;
  const bool ok = ReadValue<journal::JournalDataset>(value, [&](journal::JournalDataset::Reader r) {
    access.owner = r.getOwner();
    for (capnp::Text::Reader name : r.getReaders()) {
      access.readers.emplace_back(name.cStr(), name.size());
    }
    access.generation = r.getGeneration();
  });
  if (!ok || !IsValidTenantName(access.owner)) return Bad("a bad dataset record");
  return std::make_pair(std::string(key.substr(kDatasetPrefix.size())), std::move(access));
}

Result<std::pair<std::string, TenantQuota>> DecodeQuota(std::string_view key,
                                                        std::string_view value) {
  TenantQuota quota;
  const bool ok = ReadValue<journal::JournalQuota>(value, [&](journal::JournalQuota::Reader r) {
    quota.memory = r.getMemoryBytes();
    quota.disk = r.getDiskBytes();
  });
  if (!ok) return Bad("a bad quota record");
  return std::make_pair(std::string(key.substr(kQuotaPrefix.size())), quota);
}

Result<LostRecord> DecodeLost(std::string_view key, std::string_view value) {
  Result<BlockId> id = BlockId::Parse(key.substr(kLostPrefix.size()));
  if (!id.ok()) return Bad("a bad block id in a lost block");
  LostRecord record{.id = *id, .detail = {}, .worker_id = {}};
  bool level_ok = true;
  const bool ok = ReadValue<journal::JournalLost>(value, [&](journal::JournalLost::Reader r) {
    record.order = r.getOrder();
    record.version = r.getVersion();
    record.size = r.getSize();
    level_ok = static_cast<int>(r.getLevel()) < kLevelCount;
    record.level = FromProto(r.getLevel());
    record.lost_at_ms = r.getLostAtMs();
    record.cause = FromProto(r.getCause());
    record.detail = r.getDetail();
    record.worker_id = r.getWorkerId();
  });
  if (!ok || !level_ok) return Bad("a bad lost block");
  return record;
}

// A shuffle's record: its shape and placement, every index within its workers, one primary
// (and, with replicas, one replica) per partition, splits continuing real partitions.
Result<JournaledShuffle> DecodeShuffle(std::string_view key, std::string_view value) {
  JournaledShuffle shuffle;
  shuffle.shape.id = GetBigEndian(key.substr(kShufflePrefix.size()));
  bool level_ok = true;
  const bool ok = ReadValue<journal::JournalShuffle>(value, [&](journal::JournalShuffle::Reader r) {
    shuffle.shape.maps = r.getMaps();
    shuffle.shape.partitions = r.getPartitions();
    level_ok = static_cast<int>(r.getLevel()) < kLevelCount;
    shuffle.shape.level = FromProto(r.getLevel());
    for (capnp::Text::Reader worker : r.getWorkers()) {
      shuffle.placement.workers.emplace_back(worker.cStr(), worker.size());
    }
    for (uint32_t index : r.getPrimaries()) shuffle.placement.primaries.push_back(index);
    for (uint32_t index : r.getReplicas()) shuffle.placement.replicas.push_back(index);
    for (proto::ShuffleSplit::Reader split : r.getSplits()) {
      shuffle.placement.splits.push_back({.stream = split.getStream(),
                                          .partition = split.getPartition(),
                                          .primary = split.getPrimary(),
                                          .replica = split.getReplica()});
    }
    shuffle.owner = r.getOwner();
  });
  const ShufflePlacement& placement = shuffle.placement;
  const size_t workers = placement.workers.size();
  const uint32_t partitions = shuffle.shape.partitions;
  const auto in_range = [&](const std::vector<uint32_t>& indexes) {
    return std::all_of(indexes.begin(), indexes.end(),
                       [&](uint32_t index) { return index < workers; });
  };
  const auto split_ok = [&](const ShuffleSplitPlacement& split) {
    return split.primary < workers && split.replica < workers && split.partition < partitions &&
           split.stream >= partitions;
  };
  if (!ok || !level_ok || placement.primaries.size() != partitions ||
      (!placement.replicas.empty() && placement.replicas.size() != partitions) ||
      !in_range(placement.primaries) || !in_range(placement.replicas) ||
      !std::all_of(placement.splits.begin(), placement.splits.end(), split_ok)) {
    return Bad("a bad shuffle record");
  }
  return shuffle;
}

Result<JournaledMapCommit> DecodeMapCommit(std::string_view key, std::string_view value) {
  JournaledMapCommit commit;
  commit.shuffle_id = GetBigEndian(key.substr(kShufflePrefix.size()));
  commit.map = static_cast<uint32_t>(GetBigEndian(key.substr(kShufflePrefix.size() + 8)));
  const bool ok =
      ReadValue<journal::JournalMapCommit>(value, [&](journal::JournalMapCommit::Reader r) {
        commit.attempt = r.getAttempt();
        for (proto::PartitionPieces::Reader pieces : r.getPieces()) {
          commit.pieces.push_back({pieces.getPartition(), pieces.getPieces(), pieces.getBytes()});
        }
      });
  if (!ok) return Bad("a bad map commit");
  return commit;
}

// Appends what `decode` makes of a record to `into`.
template <typename T, typename Decode>
auto AppendTo(std::vector<T>& into, Decode decode) {
  return [&into, decode](std::string_view key, std::string_view value) -> Status {
    BM_ASSIGN_OR_RETURN(T record, decode(key, value));
    into.push_back(std::move(record));
    return Status::Ok();
  };
}

}  // namespace

Result<JournalSnapshot> MasterJournal::Load(const LocationSink& on_location) {
  JournalSnapshot snapshot;
  RecordScan scan(*db_, dir_);
  BM_RETURN_IF_ERROR(scan.Each(kWorkerPrefix, "workers", AppendTo(snapshot.workers, DecodeWorker)));
  BM_RETURN_IF_ERROR(scan.Each(kRddPrefix, "RDDs", AppendTo(snapshot.rdds, DecodeRdd)));
  bool first_retired = true;
  BM_RETURN_IF_ERROR(scan.Each(kRetiredPrefix, "retired versions",
                               [&](std::string_view key, std::string_view value) -> Status {
                                 BM_ASSIGN_OR_RETURN(RetiredRecord retired,
                                                     DecodeRetired(key, value));
                                 if (first_retired) first_retired_seq_ = retired.seq;
                                 first_retired = false;
                                 next_retired_seq_ = retired.seq + 1;
                                 snapshot.retired.push_back(std::move(retired.version));
                                 return Status::Ok();
                               }));
  BM_RETURN_IF_ERROR(scan.Each(kLeasePrefix, "leases", AppendTo(snapshot.leases, DecodeLease)));
  BM_RETURN_IF_ERROR(
      scan.Each(kDatasetPrefix, "datasets", AppendTo(snapshot.datasets, DecodeDataset)));
  BM_RETURN_IF_ERROR(scan.Each(kQuotaPrefix, "quotas", AppendTo(snapshot.quotas, DecodeQuota)));
  BM_RETURN_IF_ERROR(scan.Each(kLostPrefix, "lost blocks", AppendTo(snapshot.lost, DecodeLost)));
  // A shuffle's record has its id as key; its maps' commits follow it, keyed by id and map.
  BM_RETURN_IF_ERROR(scan.Each(
      kShufflePrefix, "shuffles", [&](std::string_view key, std::string_view value) -> Status {
        if (key.size() == kShufflePrefix.size() + 8) {
          return AppendTo(snapshot.shuffles, DecodeShuffle)(key, value);
        }
        if (key.size() == kShufflePrefix.size() + 16) {
          return AppendTo(snapshot.map_commits, DecodeMapCommit)(key, value);
        }
        return Bad("a bad shuffle key");
      }));

  // Locations last, streamed: only those of workers with a record (they come grouped by worker).
  std::unordered_set<std::string_view> known_workers;
  for (const JournaledWorker& worker : snapshot.workers) known_workers.insert(worker.id);
  std::optional<std::string> worker_id;  // of the previous location
  bool worker_known = false;
  uint64_t skipped = 0;
  BM_RETURN_IF_ERROR(scan.Each(kLocationPrefix, "locations",
                               [&](std::string_view key, std::string_view value) -> Status {
                                 auto split = SplitLocationKey(key);
                                 if (!split) return Bad("a bad location key");
                                 Result<BlockId> id = BlockId::Parse(split->second);
                                 if (!id.ok()) return Bad("a bad block id in a location key");
                                 std::optional<BlockChange> change = DecodeLocation(*id, value);
                                 if (!change) return Bad("a bad location value");
                                 if (split->first != worker_id) {
                                   worker_id = std::move(split->first);
                                   worker_known = known_workers.contains(*worker_id);
                                 }
                                 if (!worker_known) {
                                   ++skipped;
                                   return Status::Ok();
                                 }
                                 on_location(*worker_id, *change);
                                 ++snapshot.location_count;
                                 return Status::Ok();
                               }));
  if (skipped > 0) {
    spdlog::warn("master journal {}: skipped {} locations of workers with no record", dir_,
                 skipped);
  }
  return snapshot;
}

namespace {

rocksdb::WriteOptions JournalWriteOptions() {
  rocksdb::WriteOptions options;
  options.sync = false;  // the WAL survives a process kill in the page cache
  options.disableWAL = false;
  return options;
}

void PutChanges(rocksdb::WriteBatch& batch, std::string_view worker_id,
                std::span<const BlockChange> changes) {
  for (const BlockChange& change : changes) {
    const std::string key = LocationKey(worker_id, change.id);
    if (change.removed) {
      batch.Delete(key);
    } else {
      batch.Put(key, EncodeLocation(change));
    }
  }
}

}  // namespace

Status MasterJournal::RecordRegistration(const JournaledWorker& worker,
                                         std::span<const BlockChange> blocks) {
  capnp::MallocMessageBuilder message;
  journal::JournalWorker::Builder record = message.initRoot<journal::JournalWorker>();
  record.setAddress(worker.address);
  record.setHost(worker.host);
  record.setRack(worker.rack);
  record.setPublicKey(worker.public_key);
  rocksdb::WriteBatch batch;
  batch.DeleteRange(LocationPrefix(worker.id), LocationPrefixEnd(worker.id));
  batch.Put(WorkerKey(worker.id), Flatten(message));
  PutChanges(batch, worker.id, blocks);
  return Write(batch, "journaling the registration of worker " + worker.id);
}

Status MasterJournal::RecordChanges(std::string_view worker_id,
                                    std::span<const BlockChange> changes) {
  if (changes.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  PutChanges(batch, worker_id, changes);
  return Write(batch, "journaling block changes of worker " + std::string(worker_id));
}

Status MasterJournal::RecordWorkerDropped(std::string_view worker_id) {
  rocksdb::WriteBatch batch;
  batch.DeleteRange(LocationPrefix(worker_id), LocationPrefixEnd(worker_id));
  batch.Delete(WorkerKey(worker_id));
  return Write(batch, "journaling the drop of worker " + std::string(worker_id));
}

Status MasterJournal::RecordRdd(const JournaledRdd& rdd) {
  capnp::MallocMessageBuilder message;
  journal::JournalRdd::Builder record = message.initRoot<journal::JournalRdd>();
  record.setName(rdd.name);
  record.setLevel(ToProto(rdd.level));
  record.setTotalPartitions(rdd.total_partitions);
  rocksdb::WriteBatch batch;
  batch.Put(RddKey(rdd.rdd_id), Flatten(message));
  return Write(batch, "journaling RDD " + std::to_string(rdd.rdd_id));
}

Status MasterJournal::RecordRetired(std::span<const std::pair<BlockId, uint64_t>> retired) {
  if (retired.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const auto& [id, version] : retired) {
    std::string value;
    PutBigEndian(value, version);
    value += id.ToString();
    batch.Put(RetiredKey(next_retired_seq_++), value);
  }
  uint64_t first = first_retired_seq_;
  if (next_retired_seq_ - first_retired_seq_ > kMaxRetired) {
    first = next_retired_seq_ - kMaxRetired;
    batch.DeleteRange(RetiredKey(first_retired_seq_), RetiredKey(first));
  }
  Status written =
      Write(batch, "journaling " + std::to_string(retired.size()) + " retired versions");
  if (written.ok()) first_retired_seq_ = first;
  return written;
}

Status MasterJournal::RecordShuffles(const ShuffleEffects& effects) {
  if (effects.recorded.empty() && effects.committed.empty() && effects.uncommitted.empty() &&
      effects.forgotten.empty()) {
    return Status::Ok();
  }
  rocksdb::WriteBatch batch;
  for (const JournaledShuffle& shuffle : effects.recorded) {
    capnp::MallocMessageBuilder message;
    journal::JournalShuffle::Builder record = message.initRoot<journal::JournalShuffle>();
    record.setMaps(shuffle.shape.maps);
    record.setPartitions(shuffle.shape.partitions);
    record.setLevel(ToProto(shuffle.shape.level));
    const ShufflePlacement& placement = shuffle.placement;
    auto workers = record.initWorkers(placement.workers.size());
    for (size_t i = 0; i < placement.workers.size(); ++i) workers.set(i, placement.workers[i]);
    auto primaries = record.initPrimaries(placement.primaries.size());
    for (size_t i = 0; i < placement.primaries.size(); ++i) {
      primaries.set(i, placement.primaries[i]);
    }
    auto replicas = record.initReplicas(placement.replicas.size());
    for (size_t i = 0; i < placement.replicas.size(); ++i) replicas.set(i, placement.replicas[i]);
    EncodeSplits(placement.splits, record.initSplits(placement.splits.size()));
    record.setOwner(shuffle.owner);
    batch.Put(ShuffleKey(shuffle.shape.id), Flatten(message));
  }
  for (const JournaledMapCommit& commit : effects.committed) {
    capnp::MallocMessageBuilder message;
    journal::JournalMapCommit::Builder record = message.initRoot<journal::JournalMapCommit>();
    record.setAttempt(commit.attempt);
    auto pieces = record.initPieces(commit.pieces.size());
    for (size_t i = 0; i < commit.pieces.size(); ++i) {
      pieces[i].setPartition(commit.pieces[i].partition);
      pieces[i].setPieces(commit.pieces[i].pieces);
      pieces[i].setBytes(commit.pieces[i].bytes);
    }
    batch.Put(MapCommitKey(commit.shuffle_id, commit.map), Flatten(message));
  }
  for (const auto& [shuffle_id, map] : effects.uncommitted) {
    batch.Delete(MapCommitKey(shuffle_id, map));
  }
  for (uint64_t shuffle_id : effects.forgotten) {
    // Ids are at most 2^63 - 1 in the protocol's text form; the range ends at the next id.
    batch.DeleteRange(ShuffleKey(shuffle_id), ShuffleKey(shuffle_id + 1));
  }
  return Write(batch, "journaling shuffles");
}

Status MasterJournal::RecordRddForgotten(uint64_t rdd_id) {
  rocksdb::WriteBatch batch;
  batch.Delete(RddKey(rdd_id));
  return Write(batch, "journaling the removal of RDD " + std::to_string(rdd_id));
}

Status MasterJournal::RecordDataset(const std::string& dataset, const DatasetAccess& access) {
  capnp::MallocMessageBuilder message;
  journal::JournalDataset::Builder record = message.initRoot<journal::JournalDataset>();
  record.setOwner(access.owner);
  auto readers = record.initReaders(static_cast<unsigned>(access.readers.size()));
  for (size_t i = 0; i < access.readers.size(); ++i) readers.set(i, access.readers[i]);
  record.setGeneration(access.generation);
  rocksdb::WriteBatch batch;
  batch.Put(std::string(kDatasetPrefix) + dataset, Flatten(message));
  return Write(batch, "journaling the owner of " + dataset);
}

Status MasterJournal::RecordQuota(const std::string& tenant,
                                  const std::optional<TenantQuota>& quota) {
  rocksdb::WriteBatch batch;
  const std::string key = std::string(kQuotaPrefix) + tenant;
  if (quota) {
    capnp::MallocMessageBuilder message;
    journal::JournalQuota::Builder record = message.initRoot<journal::JournalQuota>();
    record.setMemoryBytes(quota->memory);
    record.setDiskBytes(quota->disk);
    batch.Put(key, Flatten(message));
  } else {
    batch.Delete(key);
  }
  return Write(batch, "journaling the quota of tenant " + tenant);
}

Status MasterJournal::RecordLeases(std::span<const JournaledLease> held,
                                   std::span<const BlockId> ended) {
  if (held.empty() && ended.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const BlockId& block : ended) batch.Delete(std::string(kLeasePrefix) + block.ToString());
  for (const JournaledLease& lease : held) {
    std::string value;
    PutBigEndian(value, lease.token);
    PutBigEndian(value, lease.length_ms);
    value += lease.holder;
    batch.Put(std::string(kLeasePrefix) + lease.block.ToString(), value);
  }
  return Write(batch, "journaling compute leases");
}

Status MasterJournal::RecordLost(const LostBlocks::Changes& changes) {
  if (changes.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const BlockId& id : changes.forgotten)
    batch.Delete(std::string(kLostPrefix) + id.ToString());
  for (const LostRecord& record : changes.recorded) {
    capnp::MallocMessageBuilder message;
    journal::JournalLost::Builder value = message.initRoot<journal::JournalLost>();
    value.setOrder(record.order);
    value.setVersion(record.version);
    value.setSize(record.size);
    value.setLevel(ToProto(record.level));
    value.setLostAtMs(record.lost_at_ms);
    value.setCause(ToProto(record.cause));
    value.setDetail(record.detail);
    value.setWorkerId(record.worker_id);
    batch.Put(std::string(kLostPrefix) + record.id.ToString(), Flatten(message));
  }
  return Write(batch, "journaling " + std::to_string(changes.recorded.size()) + " lost blocks");
}

Status MasterJournal::Write(rocksdb::WriteBatch& batch, const std::string& what) {
  BM_RETURN_IF_ERROR(FromRocks(db_->Write(JournalWriteOptions(), &batch), what));
  if (write_observer_) write_observer_(batch.Data());
  return Status::Ok();
}

Result<MasterJournal::FollowPosition> MasterJournal::ReadFollowPosition() {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kFollowKey, &value);
  if (s.IsNotFound()) return FollowPosition{};
  BM_RETURN_IF_ERROR(FromRocks(s, "reading the follow position of the master journal " + dir_));
  if (value.size() != 16) {
    return InternalError("the master journal " + dir_ + " has a bad follow position");
  }
  return FollowPosition{GetBigEndian(value), GetBigEndian(std::string_view(value).substr(8))};
}

namespace {

// Accepts a leader's batch only if it holds nothing but puts and deletes of journal records
// in the default column family: what MasterJournal writes. Checked before writing, so a
// malformed batch is refused whole and never reaches RocksDB.
class FollowedBatchCheck : public rocksdb::WriteBatch::Handler {
 public:
  rocksdb::Status PutCF(uint32_t family, const rocksdb::Slice& key,
                        const rocksdb::Slice&) override {
    return Check(family, key);
  }
  rocksdb::Status DeleteCF(uint32_t family, const rocksdb::Slice& key) override {
    return Check(family, key);
  }
  rocksdb::Status DeleteRangeCF(uint32_t family, const rocksdb::Slice& begin,
                                const rocksdb::Slice& end) override {
    rocksdb::Status checked = Check(family, begin);
    return checked.ok() ? Check(family, end, /*end=*/true) : checked;
  }
  // Anything else (merges, single deletes, blob indexes, log data) is not ours.
  rocksdb::Status MergeCF(uint32_t, const rocksdb::Slice&, const rocksdb::Slice&) override {
    return rocksdb::Status::Corruption("a merge record");
  }
  rocksdb::Status SingleDeleteCF(uint32_t, const rocksdb::Slice&) override {
    return rocksdb::Status::Corruption("a single-delete record");
  }

 private:
  static rocksdb::Status Check(uint32_t family, const rocksdb::Slice& key, bool end = false) {
    if (family != 0) return rocksdb::Status::Corruption("a record of another column family");
    const std::string_view k = key.ToStringView();
    if (k < kRecordsBegin || (end ? k > kRecordsEnd : k >= kRecordsEnd)) {
      return rocksdb::Status::Corruption("a key outside the journal's records");
    }
    return rocksdb::Status::OK();
  }
};

}  // namespace

Status MasterJournal::ApplyFollowed(std::span<const std::string_view> batches, FollowedPart part,
                                    FollowPosition position) {
  const bool snapshot = part != FollowedPart::kRecords;
  std::vector<rocksdb::WriteBatch> checked;
  checked.reserve(batches.size());
  for (std::string_view data : batches) {
    // WriteBatch takes any bytes; Iterate parses them (header, count, every record).
    if (data.size() < 12) return InvalidArgumentError("a journal batch of the leader is too short");
    rocksdb::WriteBatch& batch = checked.emplace_back(std::string(data));
    FollowedBatchCheck check;
    rocksdb::Status parsed = batch.Iterate(&check);
    if (!parsed.ok()) {
      return InvalidArgumentError("a journal batch of the leader is malformed: " +
                                  parsed.ToString());
    }
  }
  const auto encode = [](FollowPosition at) {
    std::string value;
    PutBigEndian(value, at.epoch);
    PutBigEndian(value, at.sequence);
    return value;
  };
  const std::string what = "applying the leader's journal records to " + dir_;
  if (part == FollowedPart::kSnapshotStart) {
    // Emptied first, with the position cleared: a crash in the middle of a snapshot leaves a
    // journal at position {0, 0}, which the next fetch rebuilds again.
    rocksdb::WriteBatch clear;
    clear.DeleteRange(kRecordsBegin, kRecordsEnd);
    clear.Put(kFollowKey, encode(FollowPosition{}));
    BM_RETURN_IF_ERROR(FromRocks(db_->Write(JournalWriteOptions(), &clear), what));
  }
  // Each batch is written as the leader wrote it (atomically), with the position after it, so
  // a crash between two leaves a position from which a fetch resumes. The last carries
  // `position`; a snapshot's earlier batches carry {0, 0} (incomplete until the last).
  if (checked.empty()) checked.emplace_back();
  for (size_t i = 0; i < checked.size(); ++i) {
    FollowPosition after = position;
    if (snapshot && i + 1 < checked.size()) after = FollowPosition{};
    if (!snapshot) after.sequence = position.sequence - (checked.size() - 1 - i);
    checked[i].Put(kFollowKey, encode(after));
    BM_RETURN_IF_ERROR(FromRocks(db_->Write(JournalWriteOptions(), &checked[i]), what));
  }
  return Status::Ok();
}

Result<MasterJournal::SnapshotPage> MasterJournal::ReadSnapshotPage(std::string_view after,
                                                                    size_t batch_bytes,
                                                                    size_t max_batches) {
  SnapshotPage page;
  rocksdb::ReadOptions read_options;
  read_options.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options));
  if (after.empty()) {
    it->Seek(kRecordsBegin);
  } else {
    it->Seek(rocksdb::Slice(after.data(), after.size()));
    if (it->Valid() && it->key() == rocksdb::Slice(after.data(), after.size())) it->Next();
  }
  rocksdb::WriteBatch batch;
  for (; it->Valid() && it->key().compare(kRecordsEnd) < 0; it->Next()) {
    if (page.batches.size() == std::max<size_t>(max_batches, 1)) break;  // `next` is set
    batch.Put(it->key(), it->value());
    if (batch.GetDataSize() >= batch_bytes) {
      page.batches.push_back(batch.Data());
      page.next = it->key().ToString();
      batch.Clear();
    }
  }
  BM_RETURN_IF_ERROR(FromRocks(it->status(), "reading the master journal " + dir_));
  const bool ended = !it->Valid() || it->key().compare(kRecordsEnd) >= 0;
  if (batch.Count() > 0 || page.batches.empty()) page.batches.push_back(batch.Data());
  if (ended) page.next.clear();
  return page;
}

Result<std::vector<std::string>> MasterJournal::SnapshotBatches(size_t batch_bytes) {
  std::vector<std::string> batches;
  std::string after;
  while (true) {
    BM_ASSIGN_OR_RETURN(SnapshotPage page, ReadSnapshotPage(after, batch_bytes, 64));
    for (std::string& batch : page.batches) batches.push_back(std::move(batch));
    if (page.next.empty()) return batches;
    after = std::move(page.next);
  }
}

}  // namespace bm
