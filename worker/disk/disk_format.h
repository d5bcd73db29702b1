#pragma once

#include <rocksdb/write_batch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"

// How DiskStore lays blocks out in RocksDB: the keys and the metadata codec. Pure functions:
// nothing here touches a database, so the format can be read (and tested) on its own. Changing
// anything here changes the on-disk format, which stores written before must still read.
namespace bm::disk {

// Key layout (all in the default column family). Every record of one version of a block lives
// under that version's generation, which no other version on this worker shares:
//   "v" + be64(generation)             -> Meta of the version, with its block id
//   "v" + be64(generation) + be64(i)   -> bytes of chunk i of that version
// Generations only grow, so keys are written in nearly increasing order (as RocksDB's fillseq
// writes them): flushed table files barely overlap and RocksDB moves them down the levels
// without rewriting them. With keys led by the block id, every flush overlapped every other
// and compaction rewrote each byte again (more bytes compacted than put; bench/notes).
// A version of a block of DiskStoreOptions::chunk_file_min_bytes or more keeps its bytes in a
// chunk file beside the database instead (chunk_files.h): it has the meta record only, with
// Meta::in_file set (format 5), and "chunk i" is bytes [i * chunk_bytes, ...) of that file.
// A version's meta sorts just before its chunks; replacing or removing a version deletes its
// whole range, meta included. Chunks are written before the meta; the meta and the last chunk
// go in one batch, so a crash leaves at most chunks without a meta, which Open() deletes.
//
// Stores written before this layout keep their records where they were ("legacy" versions,
// read, replaced and removed in place; new versions always use the layout above):
//   "m:" + id                                   -> Meta of the committed version
//   "c:" + id + ":" + be64(generation) + be64(i) -> bytes of chunk i of that version
// Ids never contain ':', so one id's keys never interleave with another's.
constexpr std::string_view kVersionPrefix = "v";
constexpr std::string_view kVersionsEnd = "w";  // just past every version key
constexpr std::string_view kMetaPrefix = "m:";
constexpr std::string_view kChunkPrefix = "c:";

// One stored version of a block.
struct Meta {
  StorageLevel level;
  uint64_t size;
  uint64_t generation;
  uint64_t chunk_count;
  uint32_t chunk_bytes;
  bool legacy = false;   // records under the id ("m:", "c:"), not under the generation
  uint64_t version = 0;  // which put wrote it (BlockStatus::version); 0 = unknown
  // One per chunk; empty for blocks written before digests were kept.
  std::vector<uint64_t> unit_digests{};
  // The bytes are in the version's chunk file (chunk_files.h), not in chunk records: the
  // version has a meta record only (format 5).
  bool in_file = false;
};

// The key of a legacy version's meta.
std::string MetaKey(const BlockId& id);
// The first key of legacy `generation`'s chunks; GenerationKey(id, g + 1) is just past its
// last one.
std::string GenerationKey(const BlockId& id, uint64_t generation);
// The key of `generation`'s meta, which sorts just before its chunks.
std::string VersionKey(uint64_t generation);
// Just past every record of `generation`.
std::string VersionEnd(uint64_t generation);
std::string VersionChunkKey(uint64_t generation, uint64_t index);
// The key of chunk `index` of version `meta` of block `id`, legacy or not.
std::string ChunkKeyOf(const BlockId& id, const Meta& meta, uint64_t index);
// Adds to `batch` the deletion of every record of version `meta` of block `id`.
void DeleteVersion(rocksdb::WriteBatch& batch, const BlockId& id, const Meta& meta);
// The key range holding every record of version `meta` of block `id` but a legacy meta key.
std::pair<std::string, std::string> VersionRange(const BlockId& id, const Meta& meta);
uint64_t ChunkCount(uint64_t size, uint64_t chunk_bytes);

// The value at VersionKey (format 4: the meta fields, the version token, the unit digests, the
// level's name, the block id; format 5, written for a version whose bytes are in a chunk file:
// the same with a flags byte after the token). Needs one unit digest per chunk.
std::string EncodeVersionMeta(const BlockId& id, const Meta& meta);
// Reads formats 2 to 5; nullopt when the value is malformed.
std::optional<std::pair<BlockId, Meta>> DecodeVersionMeta(std::string_view in);
// The value at a legacy "m:" key; nullopt when malformed.
std::optional<Meta> DecodeLegacyMeta(std::string_view in);

// A chunk file's trailer, after the block's bytes, so the file describes itself and a version
// whose meta record was lost with a damaged table file can be taken back from it (DiskStore):
//   EncodeVersionMeta(id, meta)    the version's meta record, byte for byte
//   be64(length of the record)
//   be64(XXH3-64 of the record)    a damaged trailer is never believed
//   be64(kChunkTrailerMagic)
// Written as the file is finished, before the meta record is committed: a file without a
// valid trailer is a write that never finished (or a file of a store written before trailers,
// which hold exactly the block's bytes: their meta record alone describes them).
constexpr uint64_t kChunkTrailerMagic = 0x626d2d6368756e6bULL;  // "bm-chunk"
constexpr size_t kChunkTrailerFooterBytes = 3 * 8;
std::string EncodeChunkTrailer(const BlockId& id, const Meta& meta);
// The length of the record a trailer's footer (its last kChunkTrailerFooterBytes) announces,
// and that record's digest; nullopt when `footer` does not end in kChunkTrailerMagic (a file
// without a trailer).
struct ChunkTrailerFooter {
  uint64_t record_bytes;
  uint64_t record_digest;
};
std::optional<ChunkTrailerFooter> DecodeChunkTrailerFooter(std::string_view footer);
// The version a trailer's record describes, checked against its footer, the file's name
// (`generation`) and its size; why not when the trailer is damaged or does not fit the file.
Result<std::pair<BlockId, Meta>> DecodeChunkTrailer(std::string_view record,
                                                    const ChunkTrailerFooter& footer,
                                                    uint64_t generation, uint64_t file_bytes);

}  // namespace bm::disk
