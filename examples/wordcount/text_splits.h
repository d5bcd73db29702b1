#pragma once

// A text file cut into N partitions of whole lines, the way Hadoop's TextInputFormat cuts it:
// partition i covers the byte range [i*size/N, (i+1)*size/N) and owns exactly the lines that
// start inside that range. So it skips a partial first line (unless it starts at byte 0, or
// the byte before its range is a newline) and reads past its end to finish its last line.
// Every line lands in exactly one partition, whatever N is.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm::wordcount {

// A file open for reading partitions of lines. Read() may be called from several threads at
// once (it only uses pread). Owns the file descriptor.
class TextSplits {
 public:
  static Result<std::unique_ptr<TextSplits>> Open(const std::string& path, uint32_t num_partitions);
  ~TextSplits();
  TextSplits(const TextSplits&) = delete;
  TextSplits& operator=(const TextSplits&) = delete;

  uint64_t file_size() const { return file_size_; }
  uint32_t num_partitions() const { return num_partitions_; }

  // The bytes of the lines of partition `index` (empty when no line starts in its range).
  Result<std::vector<std::byte>> Read(uint32_t index) const;

 private:
  TextSplits(std::string path, int fd, uint64_t file_size, uint32_t num_partitions)
      : path_(std::move(path)), fd_(fd), file_size_(file_size), num_partitions_(num_partitions) {}

  // Reads [offset, offset + length) of the file (fewer bytes only at its end).
  Result<std::vector<std::byte>> ReadAt(uint64_t offset, uint64_t length) const;

  const std::string path_;
  const int fd_;
  const uint64_t file_size_;
  const uint32_t num_partitions_;
};

}  // namespace bm::wordcount
