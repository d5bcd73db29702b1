#include "common/net/block_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>

#include "common/core/digest.h"

namespace bm {
namespace {

using arena_layout::ArenaHeader;
using arena_layout::ArenaSlot;

constexpr int kArenaSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE;
// Tries at one slot while the writer keeps changing it, before the reader asks the worker.
constexpr int kArenaTriesPerSlot = 4;

std::string ArenaErrno(const std::string& what) { return what + ": " + std::strerror(errno); }

constexpr uint64_t RoundUpToWord(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

uint64_t LoadWord(const uint64_t& word, std::memory_order order = std::memory_order_relaxed) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word)).load(order);
}
void StoreWord(uint64_t& word, uint64_t value,
               std::memory_order order = std::memory_order_relaxed) {
  std::atomic_ref<uint64_t>(word).store(value, order);
}

uint64_t ArenaShape(uint64_t size, uint64_t id_bytes, Tier tier, StorageLevel level) {
  return size | (id_bytes << 32) | (uint64_t{static_cast<uint8_t>(tier)} << 48) |
         (uint64_t{static_cast<uint8_t>(level)} << 56);
}

uint64_t ArenaIdHash(std::string_view id) {
  // Never 0, which marks an empty slot's hash.
  return DigestOf(std::as_bytes(std::span(id.data(), id.size()))) | 1;
}

// Writes bytes into 8-byte words of the ring, each stored as a relaxed atomic (the last one
// padded with zeros).
class ArenaWordWriter {
 public:
  explicit ArenaWordWriter(uint64_t* words) : words_(words) {}
  void Write(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const size_t take = std::min(bytes.size(), sizeof(uint64_t) - filled_);
      std::memcpy(reinterpret_cast<std::byte*>(&pending_) + filled_, bytes.data(), take);
      filled_ += take;
      bytes = bytes.subspan(take);
      if (filled_ == sizeof(uint64_t)) Flush();
    }
  }
  // Stores the partly filled last word, if any.
  void Finish() {
    if (filled_ > 0) Flush();
  }

 private:
  void Flush() {
    StoreWord(*words_++, pending_);
    pending_ = 0;
    filled_ = 0;
  }
  uint64_t* words_;
  uint64_t pending_ = 0;
  size_t filled_ = 0;
};

// Copies `size` bytes out of ring words, each loaded as a relaxed atomic.
void ReadArenaWords(const uint64_t* words, std::byte* out, uint64_t size) {
  uint64_t word;
  for (; size >= sizeof(word); size -= sizeof(word), out += sizeof(word)) {
    word = LoadWord(*words++);
    std::memcpy(out, &word, sizeof(word));
  }
  if (size > 0) {
    word = LoadWord(*words);
    std::memcpy(out, &word, size);
  }
}

}  // namespace

// ---- writer

Result<std::unique_ptr<BlockArenaWriter>> BlockArenaWriter::Create(const std::string& name,
                                                                   uint64_t data_bytes,
                                                                   uint64_t max_block_bytes) {
  data_bytes = RoundUpToWord(data_bytes);
  if (data_bytes == 0 || max_block_bytes == 0 || max_block_bytes > UINT32_MAX) {
    return InvalidArgumentError("an arena needs room and a block size limit below 4 GiB");
  }
  std::unique_ptr<BlockArenaWriter> arena(new BlockArenaWriter());
  arena->slot_count_ = std::bit_ceil(std::max<uint64_t>(1024, data_bytes / 2048));
  const uint64_t page = 4096;
  const uint64_t data_offset =
      (sizeof(ArenaHeader) + arena->slot_count_ * sizeof(ArenaSlot) + page - 1) / page * page;
  arena->data_offset_ = data_offset;
  arena->data_bytes_ = data_bytes;
  arena->max_block_bytes_ = max_block_bytes;
  arena->file_bytes_ = data_offset + data_bytes;
  arena->slot_ids_.assign(arena->slot_count_, nullptr);

  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return UnavailableError(ArenaErrno("memfd_create"));
  const OwnedFd writable(fd);
  if (ftruncate(fd, static_cast<off_t>(arena->file_bytes_)) != 0) {
    return OutOfSpaceError(
        ArenaErrno("sizing an arena of " + std::to_string(arena->file_bytes_) + " bytes"));
  }
  void* mapped = mmap(nullptr, arena->file_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) return OutOfSpaceError(ArenaErrno("mapping an arena"));
  arena->base_ = static_cast<std::byte*>(mapped);
  // No reader has the file yet (the descriptor passes through a socket, which orders these
  // writes before any reader's loads).
  ArenaHeader header{.magic = arena_layout::kMagic,
                     .layout_version = arena_layout::kLayoutVersion,
                     .slot_count = static_cast<uint32_t>(arena->slot_count_),
                     .data_offset = data_offset,
                     .data_bytes = data_bytes,
                     .max_block_bytes = max_block_bytes,
                     .alive_until_ns = 0,
                     .reserved = {}};
  std::memcpy(arena->base_, &header, sizeof(header));
  // The writable mapping above stays the only one: from here on nobody can map the file
  // writable, write(2) to it or change its size.
  if (fcntl(fd, F_ADD_SEALS, kArenaSeals | F_SEAL_SEAL) != 0) {
    return InternalError(ArenaErrno("sealing an arena"));
  }
  arena->KeepAlive(std::chrono::steady_clock::now() + std::chrono::seconds(3));
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  arena->read_only_fd_ = OwnedFd(open(self.c_str(), O_RDONLY | O_CLOEXEC));
  if (arena->read_only_fd_.get() < 0) {
    return InternalError(ArenaErrno("reopening an arena read-only"));
  }
  return arena;
}

BlockArenaWriter::~BlockArenaWriter() {
  if (base_ != nullptr) munmap(base_, file_bytes_);
}

ArenaSlot& BlockArenaWriter::SlotAt(size_t index) const {
  return reinterpret_cast<ArenaSlot*>(base_ + sizeof(ArenaHeader))[index];
}

void BlockArenaWriter::EmptySlot(size_t index) {
  ArenaSlot& slot = SlotAt(index);
  const uint64_t sequence = LoadWord(slot.sequence);
  StoreWord(slot.sequence, sequence + 1);
  std::atomic_thread_fence(std::memory_order_release);
  StoreWord(slot.shape, 0);
  StoreWord(slot.id_hash, 0);
  StoreWord(slot.sequence, sequence + 2, std::memory_order_release);
  const BlockId* id = slot_ids_[index];
  const auto entry = by_id_.find(*id);
  records_.erase(entry->second.record_offset);
  slot_ids_[index] = nullptr;
  by_id_.erase(entry);
}

void BlockArenaWriter::EvictRange(uint64_t offset, uint64_t length) {
  auto at = records_.upper_bound(offset);
  if (at != records_.begin()) {
    const auto before = std::prev(at);
    const Entry& entry = by_id_.at(*slot_ids_[before->second]);
    if (entry.record_offset + entry.record_bytes > offset) at = before;
  }
  while (at != records_.end() && at->first < offset + length) {
    const size_t slot = at->second;
    ++at;  // EmptySlot erases the record
    EmptySlot(slot);
  }
}

size_t BlockArenaWriter::ChooseSlot(uint64_t hash) {
  for (size_t i = 0; i < arena_layout::kProbe; ++i) {
    const size_t index = (hash + i) & (slot_count_ - 1);
    if (slot_ids_[index] == nullptr) return index;
  }
  const size_t first = hash & (slot_count_ - 1);
  EmptySlot(first);
  return first;
}

bool BlockArenaWriter::Put(const BlockId& id, const ArenaBlockFacts& facts,
                           std::span<const ChunkPtr> chunks, uint64_t size) {
  Erase(id);
  const std::string name = id.ToString();
  if (size > max_block_bytes_ || name.empty() || name.size() > arena_layout::kMaxIdBytes) {
    return false;
  }
  // The record: version, generation and digest, the bytes (padded to 8), then the id.
  const uint64_t record_bytes =
      3 * sizeof(uint64_t) + RoundUpToWord(size) + RoundUpToWord(name.size());
  if (record_bytes > data_bytes_) return false;
  if (head_ + record_bytes > data_bytes_) head_ = 0;
  EvictRange(head_, record_bytes);
  const uint64_t hash = ArenaIdHash(name);
  const size_t index = ChooseSlot(hash);
  ArenaSlot& slot = SlotAt(index);

  const uint64_t sequence = LoadWord(slot.sequence);
  StoreWord(slot.sequence, sequence + 1);
  std::atomic_thread_fence(std::memory_order_release);
  auto* words = reinterpret_cast<uint64_t*>(base_ + data_offset_ + head_);
  StoreWord(words[0], facts.version);
  StoreWord(words[1], facts.generation);
  StoreWord(words[2], facts.digest);
  ArenaWordWriter bytes(words + 3);
  uint64_t written = 0;
  for (const ChunkPtr& chunk : chunks) {
    const std::span<const std::byte> part =
        chunk->bytes().first(std::min<uint64_t>(chunk->size(), size - written));
    bytes.Write(part);
    written += part.size();
  }
  bytes.Finish();
  ArenaWordWriter id_words(words + 3 + RoundUpToWord(size) / sizeof(uint64_t));
  id_words.Write(std::as_bytes(std::span(name.data(), name.size())));
  id_words.Finish();
  StoreWord(slot.id_hash, hash);
  StoreWord(slot.record_offset, head_);
  StoreWord(slot.shape, ArenaShape(size, name.size(), facts.tier, facts.level));
  StoreWord(slot.sequence, sequence + 2, std::memory_order_release);

  const auto [entry, added] = by_id_.emplace(id, Entry{index, head_, record_bytes});
  slot_ids_[index] = &entry->first;
  records_.emplace(head_, index);
  head_ += record_bytes;
  bytes_written_ += size;
  return true;
}

void BlockArenaWriter::KeepAlive(std::chrono::steady_clock::time_point until) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until.time_since_epoch());
  StoreWord(reinterpret_cast<ArenaHeader*>(base_)->alive_until_ns,
            static_cast<uint64_t>(ns.count()), std::memory_order_release);
}

void BlockArenaWriter::Erase(const BlockId& id) {
  const auto entry = by_id_.find(id);
  if (entry != by_id_.end()) EmptySlot(entry->second.slot);
}

// ---- reader

Result<std::unique_ptr<BlockArenaReader>> BlockArenaReader::Map(OwnedFd fd,
                                                                uint64_t expected_bytes) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & kArenaSeals) != kArenaSeals) {
    return DataLossError("the worker sent an arena that could still be resized or written");
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) return InternalError(ArenaErrno("fstat of an arena"));
  if (static_cast<uint64_t>(info.st_size) != expected_bytes ||
      expected_bytes < sizeof(ArenaHeader)) {
    return DataLossError("the worker sent an arena of " + std::to_string(info.st_size) +
                         " bytes, announced as " + std::to_string(expected_bytes));
  }
  void* mapped = mmap(nullptr, expected_bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (mapped == MAP_FAILED) return UnavailableError(ArenaErrno("mapping an arena"));
  std::unique_ptr<BlockArenaReader> arena(new BlockArenaReader());
  arena->base_ = static_cast<const std::byte*>(mapped);
  arena->file_bytes_ = expected_bytes;
  ArenaHeader header;
  std::memcpy(&header, arena->base_, sizeof(header));
  const uint64_t slots_end = sizeof(ArenaHeader) + uint64_t{header.slot_count} * sizeof(ArenaSlot);
  if (header.magic != arena_layout::kMagic ||
      header.layout_version != arena_layout::kLayoutVersion || header.slot_count == 0 ||
      !std::has_single_bit(header.slot_count) || header.data_offset < slots_end ||
      header.data_offset % 8 != 0 || header.data_offset > expected_bytes ||
      header.data_bytes != expected_bytes - header.data_offset) {
    return DataLossError("the worker sent a file that is not an arena of this layout");
  }
  arena->slot_count_ = header.slot_count;
  arena->data_offset_ = header.data_offset;
  arena->data_bytes_ = header.data_bytes;
  arena->max_block_bytes_ = header.max_block_bytes;
  return arena;
}

BlockArenaReader::~BlockArenaReader() {
  if (base_ != nullptr) munmap(const_cast<std::byte*>(base_), file_bytes_);
}

BlockArenaReader::Attempt BlockArenaReader::TryRead(size_t index, uint64_t hash,
                                                    std::string_view id, ArenaBlock& out) const {
  const ArenaSlot& slot = reinterpret_cast<const ArenaSlot*>(base_ + sizeof(ArenaHeader))[index];
  const uint64_t sequence = LoadWord(slot.sequence, std::memory_order_acquire);
  if (sequence % 2 != 0) return Attempt::kRetry;
  // Whether what was read so far is what the slot held throughout.
  const auto unchanged = [&] {
    std::atomic_thread_fence(std::memory_order_acquire);
    return LoadWord(slot.sequence) == sequence;
  };
  const uint64_t shape = LoadWord(slot.shape);
  if (shape == 0 || LoadWord(slot.id_hash) != hash) return Attempt::kMiss;
  const uint64_t size = shape & 0xffffffffu;
  const uint64_t id_bytes = (shape >> 32) & 0xffffu;
  if (id_bytes != id.size()) return Attempt::kMiss;
  const uint64_t offset = LoadWord(slot.record_offset);
  const uint64_t record_bytes =
      3 * sizeof(uint64_t) + RoundUpToWord(size) + RoundUpToWord(id_bytes);
  if (size > max_block_bytes_ || offset % 8 != 0 || offset > data_bytes_ ||
      record_bytes > data_bytes_ - offset) {
    // Torn (the writer is at it) or not an arena's: nothing here to read.
    return unchanged() ? Attempt::kMiss : Attempt::kRetry;
  }
  const auto* words = reinterpret_cast<const uint64_t*>(base_ + data_offset_ + offset);
  char name[arena_layout::kMaxIdBytes];
  ReadArenaWords(words + 3 + RoundUpToWord(size) / sizeof(uint64_t),
                 reinterpret_cast<std::byte*>(name), id_bytes);
  if (std::memcmp(name, id.data(), id_bytes) != 0) {
    return unchanged() ? Attempt::kMiss : Attempt::kRetry;
  }
  std::vector<std::byte> bytes(size);
  ReadArenaWords(words + 3, bytes.data(), size);
  ArenaBlockFacts facts{.version = LoadWord(words[0]),
                        .generation = LoadWord(words[1]),
                        .tier = static_cast<Tier>((shape >> 48) & 0xffu),
                        .level = static_cast<StorageLevel>(shape >> 56),
                        .digest = LoadWord(words[2])};
  if (!unchanged()) return Attempt::kRetry;
  // The sequence held still, so these are the bytes the writer put there; the digest says
  // they are the block's (a reader never returns bytes it cannot vouch for).
  if (DigestOf(bytes) != facts.digest) return Attempt::kMiss;
  out.bytes = std::make_shared<VectorChunk>(std::move(bytes));
  out.facts = facts;
  return Attempt::kFound;
}

std::optional<ArenaBlock> BlockArenaReader::Find(const BlockId& id) const {
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
  if (LoadWord(reinterpret_cast<const ArenaHeader*>(base_)->alive_until_ns,
               std::memory_order_acquire) < static_cast<uint64_t>(now.count())) {
    return std::nullopt;
  }
  const std::string name = id.ToString();
  if (name.size() > arena_layout::kMaxIdBytes) return std::nullopt;
  const uint64_t hash = ArenaIdHash(name);
  ArenaBlock found;
  for (size_t i = 0; i < arena_layout::kProbe; ++i) {
    const size_t index = (hash + i) & (slot_count_ - 1);
    for (int tries = 0; tries < kArenaTriesPerSlot; ++tries) {
      const Attempt attempt = TryRead(index, hash, name, found);
      if (attempt == Attempt::kFound) return found;
      if (attempt == Attempt::kMiss) break;
    }
  }
  return std::nullopt;
}

}  // namespace bm
