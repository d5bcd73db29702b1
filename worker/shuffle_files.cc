#include "worker/shuffle_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/core/digest.h"
#include "common/net/local_socket.h"  // OwnedFd

namespace bm {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kRecordMagic = 0x50534d42;  // "BMSP"
// A record is at most this long (a push's piece is at most a payload frame; kept generous).
constexpr uint32_t kMaxRecordBytes = uint32_t{1} << 30;
constexpr const char* kMetaFile = "meta";
constexpr const char* kDataSuffix = ".data";

struct Header {
  uint32_t magic;
  uint32_t map;
  uint32_t attempt;
  uint32_t sequence;
  uint32_t length;
  uint32_t reserved;
  uint64_t digest;
};
static_assert(sizeof(Header) == ShuffleFiles::kRecordHeaderBytes);

Status IoError(const std::string& what, const std::string& path, int error) {
  std::string message = what + " " + path + ": " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) return OutOfSpaceError(std::move(message));
  return InternalError(std::move(message));
}

template <typename Number>
bool ParseNumber(std::string_view text, Number& out) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

ShuffleFiles::ShuffleFiles(std::vector<std::string> disk_dirs)
    : roots_([&] {
        std::vector<std::string> roots;
        for (const std::string& dir : disk_dirs)
          roots.push_back((fs::path(dir) / "shuffle").string());
        return roots;
      }()) {}

std::string ShuffleFiles::ShuffleDir(uint32_t disk, uint64_t shuffle_id) const {
  return (fs::path(roots_.at(disk)) / std::to_string(shuffle_id)).string();
}

std::string ShuffleFiles::PartitionPath(uint32_t disk, uint64_t shuffle_id,
                                        uint32_t partition) const {
  return (fs::path(ShuffleDir(disk, shuffle_id)) / (std::to_string(partition) + kDataSuffix))
      .string();
}

Status ShuffleFiles::WriteMeta(uint32_t disk, uint64_t shuffle_id, uint32_t maps,
                               const std::string& owner) const {
  const fs::path dir = ShuffleDir(disk, shuffle_id);
  const fs::path meta = dir / kMetaFile;
  std::error_code error;
  if (fs::exists(meta, error)) return Status::Ok();
  fs::create_directories(dir, error);
  if (error) return IoError("cannot make", dir.string(), error.value());
  // Written whole and renamed into place, so a crash leaves a whole meta file or none.
  const fs::path temporary = dir / "meta.tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "maps " << maps << "\nowner " << owner << "\n";
    out.flush();
    if (!out) return IoError("cannot write", temporary.string(), errno != 0 ? errno : EIO);
  }
  fs::rename(temporary, meta, error);
  if (error) return IoError("cannot write", meta.string(), error.value());
  return Status::Ok();
}

Status ShuffleFiles::Append(uint32_t disk, uint64_t shuffle_id, uint32_t partition, uint32_t maps,
                            const std::string& owner, uint64_t offset,
                            std::span<const ShuffleRecord> records) const {
  BM_RETURN_IF_ERROR(WriteMeta(disk, shuffle_id, maps, owner));
  const std::string path = PartitionPath(disk, shuffle_id, partition);
  OwnedFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (file.get() < 0) return IoError("cannot open", path, errno);
  std::vector<Header> headers(records.size());
  std::vector<iovec> vectors;
  vectors.reserve(records.size() * 2);
  for (size_t i = 0; i < records.size(); ++i) {
    const ShuffleRecord& record = records[i];
    headers[i] = Header{kRecordMagic,
                        record.map,
                        record.attempt,
                        record.sequence,
                        static_cast<uint32_t>(record.bytes.size()),
                        0,
                        record.digest};
    vectors.push_back({&headers[i], sizeof(Header)});
    if (!record.bytes.empty()) {
      vectors.push_back({const_cast<std::byte*>(record.bytes.data()), record.bytes.size()});
    }
  }
  // pwritev takes at most IOV_MAX vectors and may write less than asked.
  size_t next = 0;
  while (next < vectors.size()) {
    const int count = static_cast<int>(std::min<size_t>(vectors.size() - next, IOV_MAX));
    const ssize_t written =
        ::pwritev(file.get(), vectors.data() + next, count, static_cast<off_t>(offset));
    if (written < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot write", path, errno);
    }
    offset += static_cast<uint64_t>(written);
    size_t left = static_cast<size_t>(written);
    while (next < vectors.size() && left >= vectors[next].iov_len) left -= vectors[next++].iov_len;
    if (left > 0) {
      vectors[next].iov_base = static_cast<char*>(vectors[next].iov_base) + left;
      vectors[next].iov_len -= left;
    }
  }
  return Status::Ok();
}

Result<OwnedFd> ShuffleFiles::OpenForReading(uint32_t disk, uint64_t shuffle_id,
                                             uint32_t partition) const {
  const std::string path = PartitionPath(disk, shuffle_id, partition);
  OwnedFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno == ENOENT) return NotFoundError("partition file " + path + " is gone");
    return IoError("cannot open", path, errno);
  }
  return file;
}

Result<ChunkPtr> ShuffleFiles::Read(uint32_t disk, uint64_t shuffle_id, uint32_t partition,
                                    uint64_t offset, uint64_t length) const {
  const std::string path = PartitionPath(disk, shuffle_id, partition);
  BM_ASSIGN_OR_RETURN(OwnedFd file, OpenForReading(disk, shuffle_id, partition));
  std::vector<std::byte> bytes(length);
  size_t done = 0;
  while (done < length) {
    const ssize_t got =
        ::pread(file.get(), bytes.data() + done, length - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return IoError("cannot read", path, errno);
    }
    if (got == 0) {
      return InternalError("partition file " + path + " ends at " + std::to_string(offset + done) +
                           ", before " + std::to_string(offset + length));
    }
    done += static_cast<size_t>(got);
  }
  return ChunkPtr(std::make_shared<VectorChunk>(std::move(bytes)));
}

void ShuffleFiles::RemovePartition(uint32_t disk, uint64_t shuffle_id, uint32_t partition) const {
  const std::string path = PartitionPath(disk, shuffle_id, partition);
  std::error_code error;
  fs::remove(path, error);
  if (error) spdlog::warn("cannot remove shuffle partition file {}: {}", path, error.message());
}

void ShuffleFiles::RemoveShuffle(uint64_t shuffle_id) const {
  for (uint32_t disk = 0; disk < disks(); ++disk) {
    const std::string dir = ShuffleDir(disk, shuffle_id);
    std::error_code error;
    fs::remove_all(dir, error);
    if (error) spdlog::warn("cannot remove shuffle directory {}: {}", dir, error.message());
  }
}

LoadedShufflePartition ShuffleFiles::ScanPartition(uint32_t disk, uint32_t partition,
                                                   const std::string& path) const {
  LoadedShufflePartition loaded{.disk = disk, .partition = partition};
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (file == nullptr) {
    spdlog::warn("cannot read shuffle partition file {}: {}", path, std::strerror(errno));
    return loaded;
  }
  std::vector<char> buffer(size_t{1} << 20);
  std::setvbuf(file.get(), buffer.data(), _IOFBF, buffer.size());
  std::vector<std::byte> bytes;
  uint64_t at = 0;
  std::string torn;
  while (true) {
    Header header;
    const size_t got = std::fread(&header, 1, sizeof(header), file.get());
    if (got == 0) break;
    if (got != sizeof(header) || header.magic != kRecordMagic || header.length > kMaxRecordBytes) {
      torn = "a broken record header";
      break;
    }
    bytes.resize(header.length);
    if (std::fread(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
      torn = "a record cut short";
      break;
    }
    if (DigestOf(bytes) != header.digest) {
      torn = "a record that does not match its digest";
      break;
    }
    loaded.records.push_back(ShuffleFileRecord{.map = header.map,
                                               .attempt = header.attempt,
                                               .sequence = header.sequence,
                                               .length = header.length,
                                               .digest = header.digest,
                                               .offset = at + sizeof(Header)});
    at += sizeof(Header) + header.length;
  }
  loaded.file_bytes = at;
  if (!torn.empty()) {
    // What follows it was never acknowledged whole: pushes are answered after their flush
    // only in memory, and a torn tail is the write the crash interrupted.
    spdlog::warn("shuffle partition file {} ends in {} at {}: keeping the {} records before it",
                 path, torn, at, loaded.records.size());
    file.reset();
    if (::truncate(path.c_str(), static_cast<off_t>(at)) != 0) {
      spdlog::warn("cannot truncate {}: {}", path, std::strerror(errno));
    }
  }
  return loaded;
}

std::vector<LoadedShuffle> ShuffleFiles::Load() const {
  std::vector<LoadedShuffle> shuffles;
  for (uint32_t disk = 0; disk < disks(); ++disk) {
    std::error_code error;
    if (!fs::exists(roots_[disk], error)) continue;
    fs::directory_iterator dirs(roots_[disk], error);
    if (error) {
      spdlog::warn("cannot read the shuffles kept in {}: {}", roots_[disk], error.message());
      continue;
    }
    for (const fs::directory_entry& dir : dirs) {
      uint64_t id = 0;
      if (!dir.is_directory(error) || !ParseNumber(dir.path().filename().string(), id)) continue;
      std::ifstream meta(dir.path() / kMetaFile);
      std::string maps_word;
      std::string owner_word;
      uint32_t maps = 0;
      std::string owner;
      if (!(meta >> maps_word >> maps) || maps_word != "maps" || !(meta >> owner_word) ||
          owner_word != "owner") {
        spdlog::warn("shuffle directory {} has no readable meta file: removing it",
                     dir.path().string());
        fs::remove_all(dir.path(), error);
        continue;
      }
      std::getline(meta, owner);
      if (!owner.empty() && owner.front() == ' ') owner.erase(0, 1);
      auto found = std::find_if(shuffles.begin(), shuffles.end(),
                                [&](const LoadedShuffle& s) { return s.id == id; });
      if (found == shuffles.end()) {
        shuffles.push_back(LoadedShuffle{.id = id, .maps = maps, .owner = owner});
        found = shuffles.end() - 1;
      }
      for (const fs::directory_entry& file : fs::directory_iterator(dir.path(), error)) {
        const std::string name = file.path().filename().string();
        uint32_t partition = 0;
        if (!name.ends_with(kDataSuffix) ||
            !ParseNumber(std::string_view(name).substr(0, name.size() - std::strlen(kDataSuffix)),
                         partition)) {
          continue;
        }
        found->partitions.push_back(ScanPartition(disk, partition, file.path().string()));
      }
    }
  }
  return shuffles;
}

}  // namespace bm
