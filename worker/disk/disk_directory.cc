#include "worker/disk/disk_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace bm {

namespace {

FileIdentity IdentityFromStat(const struct stat& st) { return FileIdentity{st.st_dev, st.st_ino}; }

std::string LockPathOf(const std::string& dir) {
  return (std::filesystem::path(dir) / DiskDirectoryLock::kLockFileName).string();
}

}  // namespace

std::string FileIdentity::ToString() const {
  return std::to_string(static_cast<uint64_t>(device)) + ":" +
         std::to_string(static_cast<uint64_t>(inode));
}

Result<FileIdentity> IdentityOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    std::string message = "stat " + path + ": " + std::strerror(error);
    if (error == ENOENT || error == ENOTDIR) return NotFoundError(std::move(message));
    return InternalError(std::move(message));
  }
  return IdentityFromStat(st);
}

Status CheckDistinctDirectories(std::span<const std::string> paths) {
  // What each path is: its identity when it exists, else its normal absolute spelling.
  struct Seen {
    std::optional<FileIdentity> identity;
    std::string normal;
  };
  std::vector<Seen> seen;
  seen.reserve(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    Seen is;
    if (Result<FileIdentity> identity = IdentityOf(paths[i]); identity.ok()) {
      is.identity = *identity;
    } else {
      std::error_code ec;
      std::filesystem::path normal = std::filesystem::weakly_canonical(paths[i], ec);
      if (ec) normal = std::filesystem::absolute(paths[i], ec).lexically_normal();
      // "D/" and "D" alike.
      is.normal = normal.lexically_normal().string();
      while (is.normal.size() > 1 && is.normal.back() == '/') is.normal.pop_back();
    }
    for (size_t j = 0; j < seen.size(); ++j) {
      const bool same = is.identity.has_value() ? seen[j].identity == is.identity
                                                : !seen[j].identity && seen[j].normal == is.normal;
      if (same) {
        return InvalidArgumentError("--disk-dir " + paths[j] + " and --disk-dir " + paths[i] +
                                    " are the same directory; give each disk once");
      }
    }
    seen.push_back(std::move(is));
  }
  return Status::Ok();
}

Result<std::unique_ptr<DiskDirectoryLock>> DiskDirectoryLock::Acquire(const std::string& dir) {
  const std::string path = LockPathOf(dir);
  const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) {
    return InternalError("cannot create the lock file " + path + ": " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EWOULDBLOCK) {
      return UnavailableError("disk directory " + dir +
                              " is in use by another disk store (another worker, or the same "
                              "directory given twice): " +
                              path + " is locked");
    }
    return InternalError("cannot lock " + path + ": " + std::strerror(error));
  }
  struct stat lock_stat {};
  struct stat dir_stat {};
  if (::fstat(fd, &lock_stat) != 0 || ::stat(dir.c_str(), &dir_stat) != 0) {
    const int error = errno;
    ::close(fd);
    return InternalError("stat of the disk directory " + dir + ": " + std::strerror(error));
  }
  return std::unique_ptr<DiskDirectoryLock>(
      new DiskDirectoryLock(dir, fd, IdentityFromStat(dir_stat), IdentityFromStat(lock_stat)));
}

DiskDirectoryLock::~DiskDirectoryLock() { ::close(fd_); }

Result<OpenedDirectory> IdentifyDiskDirectory(const std::string& dir) {
  OpenedDirectory opened;
  BM_ASSIGN_OR_RETURN(opened.directory, IdentityOf(dir));
  if (Result<FileIdentity> lock = IdentityOf(LockPathOf(dir)); lock.ok()) {
    opened.lock_file = *lock;
  } else if (lock.status().code() != StatusCode::kNotFound) {
    return lock.status();
  }
  return opened;
}

Status CheckStillOpened(const std::string& dir, const OpenedDirectory& opened) {
  Result<FileIdentity> now = IdentityOf(dir);
  if (!now.ok()) {
    return InternalError("the disk directory " + dir + " is gone (" + now.status().message() +
                         "): moved away or unmounted");
  }
  if (*now != opened.directory) {
    return InternalError("the disk directory " + dir +
                         " is no longer the one opened (device:inode " +
                         opened.directory.ToString() + ", now " + now->ToString() +
                         "): moved away and replaced, or its filesystem unmounted");
  }
  if (!opened.lock_file.has_value()) return Status::Ok();
  const std::string lock_path = LockPathOf(dir);
  Result<FileIdentity> lock = IdentityOf(lock_path);
  if (!lock.ok()) {
    return InternalError("the disk store's lock file " + lock_path + " is gone (" +
                         lock.status().message() + "): the store's files were deleted");
  }
  if (*lock != *opened.lock_file) {
    return InternalError("the disk store's lock file " + lock_path +
                         " is not the one the store holds (device:inode " +
                         opened.lock_file->ToString() + ", now " + lock->ToString() +
                         "): the store's files were replaced");
  }
  return Status::Ok();
}

}  // namespace bm
