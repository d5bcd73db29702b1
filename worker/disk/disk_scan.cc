#include "worker/disk/disk_scan.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "common/core/big_endian.h"

namespace bm::disk {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNoSpace()) return OutOfSpaceError(what + ": disk full: " + s.ToString());
  return InternalError(what + ": " + s.ToString());
}

namespace {

// One scan: the legacy metas, then the versions, then the legacy chunks, each in one pass of
// one iterator (fresh ones where a seek met damaged data).
class Scanner {
 public:
  Scanner(rocksdb::DB& db, const rocksdb::ReadOptions& read_options, const std::string& dir)
      : db_(db), read_options_(read_options), dir_(dir) {}

  Result<DiskScan> Run() {
    std::unique_ptr<rocksdb::Iterator> it(db_.NewIterator(read_options_));
    BM_RETURN_IF_ERROR(ScanLegacyMetas(*it));
    it.reset(db_.NewIterator(read_options_));  // one that met damage stays failed
    BM_RETURN_IF_ERROR(ScanVersions(it));
    it.reset(db_.NewIterator(read_options_));
    BM_RETURN_IF_ERROR(ScanLegacyChunks(*it));
    if (!legacy_damage_.empty()) {
      // Legacy records have no generation range of their own: any committed block still
      // missing may have been there (after the version scan's own ranges, which come first).
      scan_.unreadable_generations.push_back({0, UINT64_MAX, legacy_damage_});
    }
    if (orphan_generations_ > 0) {
      spdlog::info("disk store: deleting chunks of {} unfinished writes", orphan_generations_);
    }
    return std::move(scan_);
  }

 private:
  // A commit replaces a version in one batch, so an id has one meta; should two ever be found,
  // the newer is kept.
  void Remember(const BlockId& id, const Meta& meta) {
    scan_.max_generation = std::max(scan_.max_generation, meta.generation);
    if (const Meta* found = scan_.index.Find(id)) {
      const bool newer = meta.generation > found->generation;
      DeleteVersion(scan_.garbage, id, newer ? *found : meta);
      if (!newer) return;
    }
    scan_.index.Put(id, meta);
  }

  Status ScanLegacyMetas(rocksdb::Iterator& it) {
    for (it.Seek(kMetaPrefix); it.Valid() && it.key().starts_with(kMetaPrefix); it.Next()) {
      std::string_view key = it.key().ToStringView();
      Result<BlockId> id = BlockId::Parse(key.substr(kMetaPrefix.size()));
      std::optional<Meta> meta = DecodeLegacyMeta(it.value().ToStringView());
      if (!id.ok() || !meta.has_value()) {
        // Its chunks, if any, become orphans and go in ScanLegacyChunks.
        spdlog::warn("disk store: dropping unreadable metadata record '{}'", key.substr(0, 200));
        scan_.garbage.Delete(it.key());
        continue;
      }
      Remember(*id, *meta);
    }
    if (it.status().IsCorruption()) {
      // Their seek meets the first table block past "m:", often a version's: the versions are
      // scanned on their own, stepping over the damage.
      NoteLegacyDamage(it.status().ToString(), "metadata");
      return Status::Ok();
    }
    return FromRocks(it.status(), "reading disk store metadata");
  }

  void NoteLegacyDamage(const std::string& error, const char* what) {
    spdlog::error(
        "disk store {}: the scan of legacy block {} met damaged table data ({}); "
        "the legacy blocks past it are lost",
        dir_, what, error);
    if (legacy_damage_.empty()) {
      legacy_damage_ =
          "index table " + DamagedTable(error, 0, UINT64_MAX) + " was damaged (" + error + ")";
    }
  }

  // Called when seeking to VersionKey(generation) met a table block that failed its checksum.
  // Finds the first generation after it whose seek reads cleanly (doubling the step, then
  // halving back), leaves `it` there and returns it (UINT64_MAX: none, the damage runs to the
  // end). Each probe seeks a fresh iterator: one that met an error stays failed.
  Result<uint64_t> SeekPastCorruption(std::unique_ptr<rocksdb::Iterator>& it, uint64_t generation) {
    auto seek = [&](uint64_t probe) -> Result<bool> {
      it.reset(db_.NewIterator(read_options_));
      it->Seek(VersionKey(probe));
      if (it->status().ok()) return true;
      if (it->status().IsCorruption()) return false;
      return FromRocks(it->status(), "scanning disk store versions");
    };
    uint64_t bad = generation;  // seeking here fails
    uint64_t good = UINT64_MAX;
    for (uint64_t step = 1; bad < UINT64_MAX; step = std::min<uint64_t>(step * 2, 1ull << 62)) {
      const uint64_t probe = step > UINT64_MAX - bad ? UINT64_MAX : bad + step;
      BM_ASSIGN_OR_RETURN(bool clean, seek(probe));
      if (clean) {
        good = probe;
        break;
      }
      bad = probe;
    }
    if (good == UINT64_MAX) {
      it.reset(db_.NewIterator(read_options_));
      it->Seek(kVersionsEnd);
      BM_RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store versions"));
      return UINT64_MAX;
    }
    while (good - bad > 1) {
      const uint64_t middle = bad + (good - bad) / 2;
      BM_ASSIGN_OR_RETURN(bool clean, seek(middle));
      (clean ? good : bad) = middle;
    }
    BM_ASSIGN_OR_RETURN(bool clean, seek(good));
    if (!clean) return InternalError("disk store: a seek past damaged table data failed twice");
    return good;
  }

  // The table file whose damage `error` reports: the one it names (RocksDB names the file in
  // a checksum mismatch), else those holding keys of generations [first, end).
  std::string DamagedTable(const std::string& error, uint64_t first, uint64_t end) {
    if (const size_t sst = error.find(".sst"); sst != std::string::npos) {
      const size_t slash = error.find_last_of("/ ", sst);
      return error.substr(slash == std::string::npos ? 0 : slash + 1,
                          sst + 4 - (slash == std::string::npos ? 0 : slash + 1));
    }
    std::vector<rocksdb::LiveFileMetaData> tables;
    db_.GetLiveFilesMetaData(&tables);
    const std::string from = VersionKey(first);
    const std::string to = end == UINT64_MAX ? std::string(kVersionsEnd) : VersionKey(end);
    std::string names;
    for (const rocksdb::LiveFileMetaData& table : tables) {
      if (table.largestkey < from || table.smallestkey >= to) continue;
      const std::string name = table.name.substr(table.name.find_last_of('/') + 1);
      names += (names.empty() ? "" : ", ") + name;
    }
    return names.empty() ? "(unknown)" : names;
  }

  // Seeks to the first record of `generation` or after; a seek that meets damaged table data
  // steps over the generations it holds (see SeekPastCorruption): their versions are lost, and
  // named so by the commit journal check.
  Status SeekVersion(std::unique_ptr<rocksdb::Iterator>& it, uint64_t generation) {
    // From the prefix itself at first, so malformed short keys are met (and deleted) too.
    it->Seek(generation == 0 ? std::string(kVersionPrefix) : VersionKey(generation));
    if (!it->status().IsCorruption()) return Status::Ok();
    const std::string error = it->status().ToString();
    BM_ASSIGN_OR_RETURN(uint64_t readable, SeekPastCorruption(it, generation));
    const std::string damage =
        "index table " + DamagedTable(error, generation, readable) + " was damaged (" + error + ")";
    spdlog::error(
        "disk store {}: {}: the metadata of generations {} to {} is lost (blocks in chunk files "
        "are taken back from them); serving the rest",
        dir_, damage, generation,
        readable == UINT64_MAX ? "the end" : std::to_string(readable - 1));
    scan_.unreadable_generations.push_back({generation, readable, damage});
    scan_.max_generation =
        std::max(scan_.max_generation, readable == UINT64_MAX ? generation : readable - 1);
    // Deleting their records keeps reads away from the damaged block.
    if (readable == UINT64_MAX) {
      scan_.garbage.DeleteRange(VersionKey(generation), kVersionsEnd);
    } else {
      scan_.garbage.DeleteRange(VersionKey(generation), VersionKey(readable));
    }
    return Status::Ok();
  }

  // One seek per stored version: its first record is its meta, unless the write was cut short
  // (chunks only), and then the whole version is deleted.
  Status ScanVersions(std::unique_ptr<rocksdb::Iterator>& it) {
    BM_RETURN_IF_ERROR(SeekVersion(it, 0));
    while (it->Valid() && it->key().starts_with(kVersionPrefix)) {
      std::string_view key = it->key().ToStringView();
      const size_t meta_key_size = kVersionPrefix.size() + 8;
      if (key.size() != meta_key_size && key.size() != meta_key_size + 8) {
        scan_.garbage.Delete(it->key());
        it->Next();
        continue;
      }
      const uint64_t generation = GetBigEndian(key.substr(kVersionPrefix.size()));
      scan_.max_generation = std::max(scan_.max_generation, generation);
      bool remembered = false;
      if (key.size() == meta_key_size) {
        // Used only where it holds a value: GCC's -Wmaybe-uninitialized misreads an optional
        // assigned, reset and read across branches once inlined (a unity build showed it).
        if (const std::optional<std::pair<BlockId, Meta>> version =
                DecodeVersionMeta(it->value().ToStringView());
            version.has_value() && version->second.generation == generation) {
          Remember(version->first, version->second);
          remembered = true;
        } else {
          spdlog::warn("disk store: dropping version {} with an unreadable metadata record",
                       generation);
        }
      }
      if (!remembered) {
        scan_.garbage.DeleteRange(VersionKey(generation), VersionEnd(generation));
        ++orphan_generations_;
      }
      if (generation == UINT64_MAX) break;
      BM_RETURN_IF_ERROR(SeekVersion(it, generation + 1));
    }
    return FromRocks(it->status(), "scanning disk store versions");
  }

  // Legacy chunks: one seek per stored generation, live ones skipped, others deleted.
  Status ScanLegacyChunks(rocksdb::Iterator& it) {
    it.Seek(kChunkPrefix);
    while (it.Valid() && it.key().starts_with(kChunkPrefix)) {
      std::string_view key = it.key().ToStringView();
      std::string_view rest = key.substr(kChunkPrefix.size());
      size_t colon = rest.find(':');
      Result<BlockId> id = colon == std::string_view::npos
                               ? Result<BlockId>(InvalidArgumentError("no ':'"))
                               : BlockId::Parse(rest.substr(0, colon));
      if (!id.ok() || rest.size() - colon - 1 != 16) {
        scan_.garbage.Delete(it.key());
        it.Next();
        continue;
      }
      uint64_t generation = GetBigEndian(rest.substr(colon + 1));
      scan_.max_generation = std::max(scan_.max_generation, generation);
      const Meta* found = scan_.index.Find(*id);
      if (found == nullptr || !found->legacy || found->generation != generation) {
        scan_.garbage.DeleteRange(GenerationKey(*id, generation),
                                  GenerationKey(*id, generation + 1));
        ++orphan_generations_;
      }
      if (generation == UINT64_MAX) break;
      it.Seek(GenerationKey(*id, generation + 1));
    }
    if (it.status().IsCorruption()) {
      // Unowned legacy chunks past the damage stay until a later scan can read them.
      NoteLegacyDamage(it.status().ToString(), "chunks");
      return Status::Ok();
    }
    return FromRocks(it.status(), "scanning disk store chunks");
  }

  rocksdb::DB& db_;
  const rocksdb::ReadOptions& read_options_;
  const std::string& dir_;
  DiskScan scan_;
  uint64_t orphan_generations_ = 0;
  std::string legacy_damage_;  // the damage a scan of legacy records met, if any
};

}  // namespace

Result<DiskScan> ScanDiskStore(rocksdb::DB& db, const rocksdb::ReadOptions& read_options,
                               const std::string& dir) {
  return Scanner(db, read_options, dir).Run();
}

}  // namespace bm::disk
