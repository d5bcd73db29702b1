#include "worker/disk/disk_space.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "common/core/byte_size.h"
#include "worker/disk/disk_store.h"

namespace bm {
namespace disk {

uint64_t WriteBufferBytesFor(uint64_t filesystem_bytes) {
  return std::clamp<uint64_t>(filesystem_bytes / 32, kMiB, 64 * kMiB);
}

// Space kept free on the filesystem for RocksDB's own files, so that its writes never meet a
// full disk (after a failed write this RocksDB asserts on the next one, see EnterReadOnly):
//   - a block's bytes sit in the write-ahead log until their memtable is flushed, so up to
//     kMaxWriteBuffers memtables are on disk twice (log and table file) around a flush;
//   - an L0 compaction reads up to kLevel0CompactionTrigger flushed files and writes its output
//     before deleting them, and any compaction writes at most max_compaction_bytes before
//     deleting its inputs;
//   - MANIFEST, OPTIONS and info LOG files, and slack for the filesystem's own rounding:
//     1/64 of the filesystem (at least 1 MiB).
// On a 64 MiB filesystem that is 31 MiB; on 1 TiB, about 17 GiB (1.6%).
uint64_t HeadroomFor(uint64_t filesystem_bytes) {
  const uint64_t write_buffer = WriteBufferBytesFor(filesystem_bytes);
  return write_buffer * (kMaxWriteBuffers + kLevel0CompactionTrigger + kCompactionFiles) +
         std::max<uint64_t>(kMiB, filesystem_bytes / 64);
}

}  // namespace disk

namespace {

class StatvfsProbe final : public SpaceProbe {
 public:
  explicit StatvfsProbe(std::string dir) : dir_(std::move(dir)) {}
  Result<FilesystemSpace> Measure() const override {
    struct statvfs st {};
    if (::statvfs(dir_.c_str(), &st) != 0) {
      return InternalError("statvfs " + dir_ + ": " + std::strerror(errno));
    }
    return FilesystemSpace{static_cast<uint64_t>(st.f_blocks) * st.f_frsize,
                           static_cast<uint64_t>(st.f_bavail) * st.f_frsize};
  }

 private:
  const std::string dir_;
};

}  // namespace

std::unique_ptr<SpaceProbe> MakeStatvfsProbe(std::string dir) {
  return std::make_unique<StatvfsProbe>(std::move(dir));
}

}  // namespace bm
