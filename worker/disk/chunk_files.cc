#include "worker/disk/chunk_files.h"

#include <fcntl.h>
#include <rocksdb/file_system.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/core/digest.h"
#include "worker/disk/disk_scan.h"

namespace bm::disk {
namespace {

constexpr size_t kNameDigits = 16;
// A trailer's record holds 8 bytes per MiB of block: 64 MiB of it would describe an 8 TiB block.
constexpr uint64_t kMaxTrailerRecordBytes = uint64_t{64} << 20;

// Plain write(2)s and pread(2)s: no mmap (a truncated file would fault a reader with SIGBUS),
// no preallocation (a file holds exactly its block).
rocksdb::FileOptions PlainFileOptions() {
  rocksdb::FileOptions options;
  options.use_mmap_writes = false;
  options.use_mmap_reads = false;
  options.allow_fallocate = false;
  return options;
}

// Bytes read from a chunk file into a buffer of their own, left uninitialised until the read
// fills it (a zeroed vector would be a second pass over every byte read).
class FileBytes final : public Chunk {
 public:
  explicit FileBytes(size_t size) : data_(new std::byte[size]), size_(size) {}
  std::byte* data() { return data_.get(); }
  std::span<const std::byte> bytes() const override { return {data_.get(), size_}; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t size_;
};

std::string NameOf(uint64_t generation) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kNameDigits, '0');
  for (size_t i = 0; i < kNameDigits; ++i) {
    name[kNameDigits - 1 - i] = kHex[(generation >> (4 * i)) & 0xF];
  }
  return name;
}

std::optional<uint64_t> GenerationOf(const std::string& name) {
  if (name.size() != kNameDigits) return std::nullopt;
  uint64_t generation = 0;
  for (char c : name) {
    int digit = 0;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    generation = (generation << 4) | static_cast<uint64_t>(digit);
  }
  return generation;
}

}  // namespace

ChunkFileWriter::ChunkFileWriter(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path)
    : file_(std::move(file)), path_(std::move(path)) {}

ChunkFileWriter::~ChunkFileWriter() {
  if (file_ != nullptr) file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
}

Status ChunkFileWriter::Append(std::span<const std::byte> bytes) {
  if (file_ == nullptr) return InternalError("chunk file " + path_ + " is closed");
  BM_RETURN_IF_ERROR(FromRocks(
      file_->Append(rocksdb::Slice(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                    rocksdb::IOOptions(), nullptr),
      "writing chunk file " + path_));
  written_ += bytes.size();
  if (written_ - synced_to_ >= kRangeSyncBytes) {
    // Starts writeback only; the durability promised (a process kill) needs none.
    BM_RETURN_IF_ERROR(FromRocks(
        file_->RangeSync(synced_to_, written_ - synced_to_, rocksdb::IOOptions(), nullptr),
        "writing chunk file " + path_));
    synced_to_ = written_;
  }
  return Status::Ok();
}

Status ChunkFileWriter::Close() {
  if (file_ == nullptr) return Status::Ok();
  rocksdb::IOStatus s = file_->Close(rocksdb::IOOptions(), nullptr);
  file_.reset();
  return FromRocks(s, "closing chunk file " + path_);
}

ChunkFiles::ChunkFiles(std::string dir, rocksdb::FileSystem* fs)
    : dir_(std::move(dir)), fs_(fs), deleter_(fs) {}

Status ChunkFiles::CreateDirectory() {
  return FromRocks(fs_->CreateDirIfMissing(dir_, rocksdb::IOOptions(), nullptr),
                   "creating chunk file directory " + dir_);
}

std::string ChunkFiles::PathOf(uint64_t generation) const {
  return dir_ + "/" + NameOf(generation);
}

Result<std::unique_ptr<ChunkFileWriter>> ChunkFiles::Create(uint64_t generation) {
  const std::string path = PathOf(generation);
  std::unique_ptr<rocksdb::FSWritableFile> file;
  BM_RETURN_IF_ERROR(FromRocks(fs_->NewWritableFile(path, PlainFileOptions(), &file, nullptr),
                               "creating chunk file " + path));
  return std::make_unique<ChunkFileWriter>(std::move(file), path);
}

Result<std::vector<ChunkPtr>> ChunkFiles::Read(uint64_t generation, uint64_t offset,
                                               uint64_t length) const {
  const std::string path = PathOf(generation);
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  rocksdb::IOStatus opened = fs_->NewRandomAccessFile(path, PlainFileOptions(), &file, nullptr);
  if (opened.IsPathNotFound() || opened.IsNotFound()) {
    return DataLossError("chunk file " + path + " is missing");
  }
  BM_RETURN_IF_ERROR(FromRocks(opened, "opening chunk file " + path));
  std::vector<ChunkPtr> chunks;
  const uint64_t end = offset + length;
  for (uint64_t at = offset; at < end;) {
    const uint64_t unit_end = (at / kDigestUnitBytes + 1) * kDigestUnitBytes;
    const size_t n = static_cast<size_t>(std::min(end, unit_end) - at);
    auto chunk = std::make_shared<FileBytes>(n);
    rocksdb::Slice result;
    BM_RETURN_IF_ERROR(FromRocks(file->Read(at, n, rocksdb::IOOptions(), &result,
                                            reinterpret_cast<char*>(chunk->data()), nullptr),
                                 "reading chunk file " + path));
    if (result.size() != n) {
      return DataLossError("chunk file " + path + " ends before byte " + std::to_string(at + n) +
                           " (read " + std::to_string(result.size()) + " of " + std::to_string(n) +
                           " bytes at " + std::to_string(at) + ")");
    }
    // The file system may answer from its own buffer (a wrapper in a test): copy it in then.
    if (result.data() != reinterpret_cast<const char*>(chunk->data())) {
      std::memcpy(chunk->data(), result.data(), n);
    }
    chunks.push_back(std::move(chunk));
    at += n;
  }
  return chunks;
}

Result<std::optional<std::pair<BlockId, Meta>>> ChunkFiles::ReadTrailer(uint64_t generation,
                                                                        uint64_t file_bytes) const {
  if (file_bytes < kChunkTrailerFooterBytes) return std::optional<std::pair<BlockId, Meta>>();
  const std::string path = PathOf(generation);
  std::unique_ptr<rocksdb::FSRandomAccessFile> file;
  BM_RETURN_IF_ERROR(FromRocks(fs_->NewRandomAccessFile(path, PlainFileOptions(), &file, nullptr),
                               "opening chunk file " + path));
  auto read = [&](uint64_t at, uint64_t n) -> Result<std::string> {
    std::string bytes(n, '\0');
    rocksdb::Slice result;
    BM_RETURN_IF_ERROR(
        FromRocks(file->Read(at, n, rocksdb::IOOptions(), &result, bytes.data(), nullptr),
                  "reading the trailer of chunk file " + path));
    if (result.size() != n) return DataLossError("chunk file " + path + " changed size");
    return std::string(result.data(), result.size());
  };
  const uint64_t footer_at = file_bytes - kChunkTrailerFooterBytes;
  BM_ASSIGN_OR_RETURN(std::string footer_bytes, read(footer_at, kChunkTrailerFooterBytes));
  std::optional<ChunkTrailerFooter> footer = DecodeChunkTrailerFooter(footer_bytes);
  if (!footer.has_value()) return std::optional<std::pair<BlockId, Meta>>();
  // A record longer than the file (or than any meta record: one digest per MiB of block) is a
  // damaged footer, not a read to make.
  if (footer->record_bytes > footer_at || footer->record_bytes > kMaxTrailerRecordBytes) {
    return DataLossError("chunk file " + path + ": its trailer announces a record of " +
                         std::to_string(footer->record_bytes) + " bytes");
  }
  BM_ASSIGN_OR_RETURN(std::string record,
                      read(footer_at - footer->record_bytes, footer->record_bytes));
  Result<std::pair<BlockId, Meta>> version =
      DecodeChunkTrailer(record, *footer, generation, file_bytes);
  if (!version.ok()) return DataLossError("chunk file " + path + ": " + version.status().message());
  return std::optional<std::pair<BlockId, Meta>>(std::move(version).value());
}

Status ChunkFiles::Delete(uint64_t generation) {
  const std::string path = PathOf(generation);
  rocksdb::IOStatus s = fs_->DeleteFile(path, rocksdb::IOOptions(), nullptr);
  if (s.IsPathNotFound() || s.IsNotFound()) return Status::Ok();
  if (!s.ok() && fs_->FileExists(path, rocksdb::IOOptions(), nullptr).IsNotFound()) {
    return Status::Ok();
  }
  return FromRocks(s, "deleting chunk file " + path);
}

void ChunkFiles::DeleteInBackground(uint64_t generation, uint64_t bytes) {
  deleter_.Delete(PathOf(generation), bytes);
}

Result<std::map<uint64_t, uint64_t>> ChunkFiles::List() const {
  std::vector<std::string> names;
  BM_RETURN_IF_ERROR(FromRocks(fs_->GetChildren(dir_, rocksdb::IOOptions(), &names, nullptr),
                               "listing chunk files in " + dir_));
  std::map<uint64_t, uint64_t> files;
  for (const std::string& name : names) {
    std::optional<uint64_t> generation = GenerationOf(name);
    if (!generation.has_value()) continue;
    uint64_t size = 0;
    rocksdb::IOStatus s = fs_->GetFileSize(dir_ + "/" + name, rocksdb::IOOptions(), &size, nullptr);
    if (s.IsPathNotFound() || s.IsNotFound()) continue;
    BM_RETURN_IF_ERROR(FromRocks(s, "measuring chunk file " + dir_ + "/" + name));
    files[*generation] = size;
  }
  return files;
}

Status ChunkFiles::FlipByte(uint64_t generation, uint64_t offset) {
  const std::string path = PathOf(generation);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return InternalError("opening chunk file " + path + ": " + std::strerror(errno));
  std::byte byte{};
  Status status;
  if (::pread(fd, &byte, 1, static_cast<off_t>(offset)) != 1) {
    status = InternalError("chunk file " + path + " has no byte " + std::to_string(offset));
  } else {
    byte ^= std::byte{0xFF};
    if (::pwrite(fd, &byte, 1, static_cast<off_t>(offset)) != 1) {
      status = InternalError("writing chunk file " + path + ": " + std::strerror(errno));
    }
  }
  ::close(fd);
  return status;
}

}  // namespace bm::disk
