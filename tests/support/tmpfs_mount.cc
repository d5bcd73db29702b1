#include "tests/support/tmpfs_mount.h"

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace bm::testing {

TmpfsMount::TmpfsMount(const std::string& dir, const std::string& size, bool read_only)
    : dir_(dir) {
  std::filesystem::create_directories(dir);
  const std::string options = "size=" + size;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", read_only ? MS_RDONLY : 0, options.c_str()) == 0) {
    mounted_ = true;
  } else {
    error_ = std::strerror(errno);
  }
}

void TmpfsMount::Unmount() {
  if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  mounted_ = false;
}

void FillUp(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const std::string mebibyte(1 << 20, 'f');
  while (out.write(mebibyte.data(), mebibyte.size())) {
  }
  out.close();
  // The last MiB did not fit: the rest of the room a KiB at a time.
  const std::string kibibyte(1 << 10, 'f');
  std::ofstream rest(path, std::ios::binary | std::ios::app);
  while (rest.write(kibibyte.data(), kibibyte.size()).flush()) {
  }
}

}  // namespace bm::testing
