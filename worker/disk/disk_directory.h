#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "blockmgr/status.h"

namespace bm {

// What a file or directory is, as the kernel knows it: its device and inode. Two spellings of
// one directory ("D", "D/", "D/.", a symlink to D) have the same identity; a directory moved
// away and another (or a file) put in its place, or a filesystem unmounted from under its mount
// point, has another.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
  std::string ToString() const;  // "device:inode"
};

// stat(2) of `path`, following symlinks. kNotFound when nothing is there; kInternal naming the
// errno otherwise.
Result<FileIdentity> IdentityOf(const std::string& path);

// Refuses a directory given twice in any spelling (two stores on one directory would name
// their chunk files from the same generations and overwrite each other's blocks): compares the
// identities of the paths that exist, and the lexically normal absolute form of those that do
// not (yet). kInvalidArgument naming both spellings.
Status CheckDistinctDirectories(std::span<const std::string> paths);

// What a disk directory was when its store opened it: the directory's identity and, when it
// has one, its lock file's.
struct OpenedDirectory {
  FileIdentity directory;
  std::optional<FileIdentity> lock_file;
};

// The disk directory a store has open, held exclusively: an flock(2) on the lock file in it
// (kLockFileName), taken when the store opens and released when it closes, so no second store,
// in this worker or another, can open the same directory (RocksDB's own LOCK is an fcntl lock,
// which a second open in the same process does not see). It remembers the identity of the
// directory and of the lock file as they were when locked, so a directory that is no longer
// the one opened is noticed (StillOpened).
//
// Thread-safe: constant after Acquire.
class DiskDirectoryLock {
 public:
  static constexpr const char* kLockFileName = "bm-disk.lock";

  // Creates the lock file if needed and locks it. kUnavailable when another store holds it
  // (the message names the directory and says so); kInternal naming the errno otherwise.
  static Result<std::unique_ptr<DiskDirectoryLock>> Acquire(const std::string& dir);
  ~DiskDirectoryLock();  // closes the lock file, which releases the lock
  DiskDirectoryLock(const DiskDirectoryLock&) = delete;
  DiskDirectoryLock& operator=(const DiskDirectoryLock&) = delete;

  const std::string& dir() const { return dir_; }
  OpenedDirectory opened() const { return {directory_, lock_file_}; }

 private:
  DiskDirectoryLock(std::string dir, int fd, FileIdentity directory, FileIdentity lock_file)
      : dir_(std::move(dir)), fd_(fd), directory_(directory), lock_file_(lock_file) {}

  const std::string dir_;
  const int fd_;
  const FileIdentity directory_;
  const FileIdentity lock_file_;
};

// The identity of `dir` and of its lock file (none when it has no lock file, as a test's
// directory without a DiskStore).
Result<OpenedDirectory> IdentifyDiskDirectory(const std::string& dir);

// Ok while `dir` is still what `opened` recorded: the same directory (device and inode) holding
// the same lock file. kInternal saying what changed otherwise: the directory moved away or
// replaced, the filesystem unmounted from under it (the bare mount point is another directory,
// on another device), or the store's files deleted.
Status CheckStillOpened(const std::string& dir, const OpenedDirectory& opened);

}  // namespace bm
