#include "common/net/sealed_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace bm {
namespace {

constexpr int kSeals = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;

std::string RegionErrno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

Result<std::shared_ptr<const SealedRegion>> SealedRegion::Create(
    const std::string& name, uint64_t size,
    const std::function<Status(std::span<std::byte>)>& fill) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return UnavailableError(RegionErrno("memfd_create"));
  // Closes the writable descriptor on every path: only the read-only one is kept.
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return OutOfSpaceError(
        RegionErrno("sizing a shared-memory region of " + std::to_string(size) + " bytes"));
  }
  if (size > 0) {
    void* writable = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (writable == MAP_FAILED) return OutOfSpaceError(RegionErrno("mapping a new region"));
    Status filled = fill({static_cast<std::byte*>(writable), size});
    // F_SEAL_WRITE is refused while a writable shared mapping exists.
    munmap(writable, size);
    BM_RETURN_IF_ERROR(filled);
  }
  if (fcntl(fd, F_ADD_SEALS, kSeals | F_SEAL_SEAL) != 0) {
    return InternalError(RegionErrno("sealing a region"));
  }
  std::shared_ptr<SealedRegion> region(new SealedRegion());
  region->size_ = size;
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  region->read_only_fd_ = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (region->read_only_fd_ < 0) return InternalError(RegionErrno("reopening a region read-only"));
  if (size > 0) {
    void* mapped = mmap(nullptr, size, PROT_READ, MAP_SHARED, region->read_only_fd_, 0);
    if (mapped == MAP_FAILED) return OutOfSpaceError(RegionErrno("mapping a sealed region"));
    region->data_ = static_cast<std::byte*>(mapped);
  }
  return std::shared_ptr<const SealedRegion>(std::move(region));
}

SealedRegion::~SealedRegion() {
  if (data_ != nullptr) munmap(data_, size_);
  if (read_only_fd_ >= 0) close(read_only_fd_);
}

Result<std::shared_ptr<const MappedRegion>> MappedRegion::Map(int fd, uint64_t size,
                                                              std::function<void()> on_unmapped) {
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSeals) != kSeals) {
    return DataLossError("the worker sent a region that is not sealed against writes");
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) return InternalError(RegionErrno("fstat of a received region"));
  if (static_cast<uint64_t>(info.st_size) != size) {
    return DataLossError("the worker sent a region of " + std::to_string(info.st_size) +
                         " bytes for a block of " + std::to_string(size));
  }
  std::byte* data = nullptr;
  if (size > 0) {
    void* mapped = mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (mapped == MAP_FAILED) return UnavailableError(RegionErrno("mapping a received region"));
    data = static_cast<std::byte*>(mapped);
  }
  return std::shared_ptr<const MappedRegion>(new MappedRegion(data, size, std::move(on_unmapped)));
}

MappedRegion::~MappedRegion() {
  if (data_ != nullptr) munmap(data_, size_);
  if (on_unmapped_) on_unmapped_();
}

}  // namespace bm
