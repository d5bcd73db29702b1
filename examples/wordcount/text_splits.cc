#include "examples/wordcount/text_splits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bm::wordcount {
namespace {

// How much more is read at a time to finish a partition's last line.
constexpr uint64_t kLineTailChunk = 64 * 1024;

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

Result<std::unique_ptr<TextSplits>> TextSplits::Open(const std::string& path,
                                                     uint32_t num_partitions) {
  if (num_partitions == 0) return InvalidArgumentError("the number of partitions must be > 0");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open " + path + ": " + ErrnoText());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + " is not a readable regular file");
  }
  return std::unique_ptr<TextSplits>(
      new TextSplits(path, fd, static_cast<uint64_t>(st.st_size), num_partitions));
}

TextSplits::~TextSplits() { ::close(fd_); }

Result<std::vector<std::byte>> TextSplits::ReadAt(uint64_t offset, uint64_t length) const {
  std::vector<std::byte> bytes(length);
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd_, bytes.data() + done, length - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("reading " + path_ + " failed: " + ErrnoText());
    if (n == 0) break;  // end of file
    done += static_cast<uint64_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

Result<std::vector<std::byte>> TextSplits::Read(uint32_t index) const {
  if (index >= num_partitions_) {
    return InvalidArgumentError("partition " + std::to_string(index) + " of " +
                                std::to_string(num_partitions_) + " does not exist");
  }
  // 128-bit products: index * size overflows 64 bits for large files cut finely.
  using u128 = unsigned __int128;
  const uint64_t start = static_cast<uint64_t>(u128{index} * file_size_ / num_partitions_);
  const uint64_t end = static_cast<uint64_t>(u128{index + 1ULL} * file_size_ / num_partitions_);
  if (start >= end) return std::vector<std::byte>{};

  // A line starts at p when p == 0 or byte p-1 is a newline; reading from start-1 lets the
  // newline search find a line that starts exactly at `start`.
  const uint64_t read_from = start == 0 ? 0 : start - 1;
  BM_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, ReadAt(read_from, end - read_from));
  if (start != 0) {
    auto newline = std::find(bytes.begin(), bytes.end(), std::byte{'\n'});
    // No newline in [start-1, end): every line starting in range started before it.
    if (newline == bytes.end()) return std::vector<std::byte>{};
    bytes.erase(bytes.begin(), newline + 1);
    if (bytes.empty()) return bytes;  // the only line start is `end`: the next partition's
  }

  // Finish the last line, which may run past `end`.
  uint64_t offset = end;
  while (!bytes.empty() && bytes.back() != std::byte{'\n'} && offset < file_size_) {
    BM_ASSIGN_OR_RETURN(std::vector<std::byte> tail, ReadAt(offset, kLineTailChunk));
    if (tail.empty()) break;
    auto newline = std::find(tail.begin(), tail.end(), std::byte{'\n'});
    const auto stop = newline == tail.end() ? tail.end() : newline + 1;
    bytes.insert(bytes.end(), tail.begin(), stop);
    offset += tail.size();
  }
  return bytes;
}

}  // namespace bm::wordcount
