#include "worker/disk_set.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/core/byte_size.h"

namespace bm {

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// The check file, in the disk's directory beside the store's own files.
constexpr const char* kCheckFileName = ".bm-disk-check";
constexpr size_t kCheckBytes = 4096;

Status ErrnoStatus(const std::string& what, int error) {
  std::string message = what + ": " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) return OutOfSpaceError(message);
  return InternalError(message);
}

}  // namespace

Result<DiskDirSpec> ParseDiskDir(std::string_view text) {
  DiskDirSpec spec;
  const size_t colon = text.rfind(':');
  spec.path = std::string(text.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string_view limit = text.substr(colon + 1);
    Result<uint64_t> parsed = ParseByteSize(limit);
    if (limit.empty() || !parsed.ok()) {
      return InvalidArgumentError(
          "--disk-dir " + std::string(text) + ": the limit after ':' must be a size like 200GiB" +
          (parsed.ok() ? std::string() : " (" + parsed.status().message() + ")"));
    }
    spec.limit = *parsed;
  }
  if (spec.path.empty()) {
    return InvalidArgumentError("--disk-dir " + std::string(text) + ": the directory is empty");
  }
  return spec;
}

std::optional<size_t> ChooseDiskByAvailableSpace(std::span<const DiskRoom> disks, uint64_t size) {
  std::optional<size_t> best;
  double best_free_fraction = -1;
  for (size_t i = 0; i < disks.size(); ++i) {
    const DiskRoom& disk = disks[i];
    if (!disk.usable || disk.capacity == 0) continue;
    const uint64_t free = disk.capacity - std::min(disk.used, disk.capacity);
    if (free < size) continue;
    const double fraction = static_cast<double>(free) / static_cast<double>(disk.capacity);
    if (fraction > best_free_fraction) {
      best = i;
      best_free_fraction = fraction;
    }
  }
  return best;
}

Status CheckDiskDirectory(const std::string& dir, const std::optional<OpenedDirectory>& opened) {
  if (opened.has_value()) BM_RETURN_IF_ERROR(CheckStillOpened(dir, *opened));
  const std::string path = (std::filesystem::path(dir) / kCheckFileName).string();
  std::vector<char> bytes(kCheckBytes);
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((stamp >> (8 * (i % 8))) ^ static_cast<int64_t>(i));
  }
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating " + path, errno);
  Status result = Status::Ok();
  const ssize_t written = ::pwrite(fd, bytes.data(), bytes.size(), 0);
  if (written < 0) {
    result = ErrnoStatus("writing " + path, errno);
  } else if (static_cast<size_t>(written) != bytes.size()) {
    result = OutOfSpaceError("writing " + path + ": short write");
  } else if (::fsync(fd) != 0) {
    result = ErrnoStatus("fsync of " + path, errno);
  } else {
    std::vector<char> back(bytes.size());
    const ssize_t read = ::pread(fd, back.data(), back.size(), 0);
    if (read < 0) {
      result = ErrnoStatus("reading " + path, errno);
    } else if (static_cast<size_t>(read) != back.size() || back != bytes) {
      result = InternalError("reading " + path + ": the bytes read back differ from those written");
    }
  }
  ::close(fd);
  ::unlink(path.c_str());
  return result;
}

DiskSet::DiskSet(std::vector<DiskSlot> disks, DiskSetOptions options)
    : options_(options), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  BM_CHECK(wake_fd_ >= 0);
  BM_CHECK(!disks.empty());
  const SteadyTime now = std::chrono::steady_clock::now();
  disks_.reserve(disks.size());
  for (DiskSlot& slot : disks) {
    BM_CHECK(slot.store != nullptr);
    Disk disk;
    disk.dir = slot.path;
    disk.path = slot.path.empty() ? "disk #" + std::to_string(disks_.size()) : slot.path;
    disk.limit = slot.limit;
    disk.scrubber = std::make_unique<Scrubber>(*slot.store, options_.scrub_bytes_per_second);
    disk.thread = std::make_unique<StorageThread>(std::move(slot.store), wake_fd_);
    disk.next_check = now + options_.check_interval;
    disk.failed_flag = std::make_unique<std::atomic<bool>>(false);
    if (!slot.failed_at_start.empty()) {
      disk.failure = "could not be opened at start: " + slot.failed_at_start;
      disk.failed_flag->store(true);
      spdlog::error("disk {} has failed: {}", disk.path, disk.failure);
    } else if (!disk.dir.empty()) {
      // A directory that cannot even be stat'ed fails its first write check.
      if (Result<OpenedDirectory> opened = IdentifyDiskDirectory(disk.dir); opened.ok()) {
        disk.opened = *opened;
      }
    }
    disks_.push_back(std::move(disk));
  }
}

DiskSet::~DiskSet() {
  for (Disk& disk : disks_) {
    // A thread stuck in a job past the timeout may never return: joining it would hang the
    // worker's shutdown. Its StorageThread, store and scrubber are leaked on purpose, so the
    // thread finds valid memory if it ever does return; its completions never run.
    if (!disk.failure.empty() && disk.thread->busy_since().has_value()) {
      spdlog::warn("disk {}: abandoning its storage thread, still stuck in a job", disk.path);
      static_cast<void>(disk.thread.release());
      static_cast<void>(disk.scrubber.release());
      static_cast<void>(disk.failed_flag.release());
      abandoned_threads_ = true;
      continue;
    }
    disk.thread.reset();  // runs the queued jobs (their completions dropped), then joins
    disk.scrubber.reset();
  }
  // An abandoned thread still signals the shared eventfd when it finishes: left open, so its
  // number is never reused by something else.
  if (!abandoned_threads_) ::close(wake_fd_);
}

size_t DiskSet::failed_count() const {
  size_t failed = 0;
  for (const Disk& disk : disks_) failed += disk.failure.empty() ? 0 : 1;
  return failed;
}

Result<DiskSet::DiskNo> DiskSet::Choose(const BlockId& id, uint64_t size,
                                        std::optional<DiskNo> holder,
                                        std::span<const DiskNo> avoid) const {
  std::vector<DiskRoom> rooms;
  rooms.reserve(disks_.size());
  for (const Disk& disk : disks_) {
    const DiskTierStats& stats = disk.thread->stats();
    rooms.push_back({disk.failure.empty() && !stats.read_only, stats.used, stats.capacity});
  }
  for (const DiskNo refused : avoid) rooms[refused].usable = false;
  if (holder.has_value()) {
    const DiskRoom& room = rooms[*holder];
    if (room.usable && room.capacity >= room.used && room.capacity - room.used >= size) {
      return *holder;
    }
  }
  if (std::optional<size_t> chosen = ChooseDiskByAvailableSpace(rooms, size)) return *chosen;
  if (failed_count() == disks_.size()) {
    return UnavailableError("every disk of this worker has failed");
  }
  // One disk says what it always said; several name each disk's room.
  std::string why;
  for (size_t i = 0; i < disks_.size(); ++i) {
    const Disk& disk = disks_[i];
    const DiskTierStats& stats = disk.thread->stats();
    std::string room;
    if (!disk.failure.empty()) {
      room = "failed";
    } else if (std::find(avoid.begin(), avoid.end(), i) != avoid.end()) {
      room = "refused this block";
    } else if (stats.read_only) {
      room = "disk store is read-only after a storage error";
    } else {
      room = FormatBytes(stats.used) + " of the " + FormatBytes(stats.capacity) +
             " it can hold in use";
    }
    if (disks_.size() == 1) {
      why = stats.read_only && disk.failure.empty() ? room : "does not fit on disk: " + room;
    } else {
      why += (why.empty() ? "" : "; ") + disk.path + ": " + room;
    }
  }
  if (disks_.size() == 1 && disks_[0].thread->stats().read_only) return OutOfSpaceError(why);
  return OutOfSpaceError("block " + id.ToString() + " of " + FormatBytes(size) + " " +
                         (disks_.size() == 1 ? why : "fits on no disk: " + why));
}

void DiskSet::Submit(DiskNo disk, StorageThread::Job job) {
  BM_CHECK(!disks_[disk].closed);
  disks_[disk].thread->Submit(std::move(job));
}

void DiskSet::Close(DiskNo disk) {
  BM_CHECK(!disks_[disk].failure.empty());
  if (disks_[disk].closed) return;
  disks_[disk].closed = true;
  disks_[disk].thread->Close();
}

Status DiskSet::FailedError(DiskNo disk, const BlockId& id) const {
  return UnavailableError("block " + id.ToString() + " was on disk " + disks_[disk].path +
                          ", which has failed: " + disks_[disk].failure);
}

size_t DiskSet::RunCompletions() {
  uint64_t count;
  ssize_t got = read(wake_fd_, &count, sizeof(count));
  (void)got;  // EAGAIN: nothing signalled; the queues are checked anyway
  size_t ran = 0;
  for (Disk& disk : disks_) {
    // A completion of a failed disk still runs (its callback answers the work that was queued
    // before the failure); the owner checks failed() before it trusts a success.
    ran += disk.thread->RunCompletions();
  }
  return ran;
}

size_t DiskSet::outstanding() const {
  size_t jobs = 0;
  for (const Disk& disk : disks_) jobs += disk.failure.empty() ? disk.thread->outstanding() : 0;
  return jobs;
}

void DiskSet::Tick(const std::function<void(DiskNo, std::vector<LostBlock>)>& maintained) {
  const SteadyTime now = std::chrono::steady_clock::now();
  for (DiskNo i = 0; i < disks_.size(); ++i) {
    Disk& disk = disks_[i];
    if (!disk.failure.empty()) continue;
    if (std::optional<SteadyTime> busy = disk.thread->busy_since();
        busy.has_value() && now - *busy > options_.check_timeout) {
      Fail(i, "a storage job has run for " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - *busy).count()) +
                  " ms, past the " + std::to_string(options_.check_timeout.count()) +
                  " ms timeout (the disk hangs)");
      continue;
    }
    if (!disk.check_queued && (disk.check_now || now >= disk.next_check)) StartCheck(i, now);
    if (!disk.maintenance_queued) {
      disk.maintenance_queued = true;
      disk.thread->Submit([this, i, scrubber = disk.scrubber.get(), failed = disk.failed_flag.get(),
                           maintained](BlockStore& store) -> StorageThread::Completion {
        if (failed->load()) {
          // Failed since it was queued: a read-only store would be reopened, into a bad disk.
          return [this, i] { disks_[i].maintenance_queued = false; };
        }
        store.Maintain();
        // What the scrubber finds bad the store drops and reports lost, with the rest.
        scrubber->Step(std::chrono::steady_clock::now());
        return [this, i, lost = store.TakeLost(), scrubbed = scrubber->stats().bytes_verified,
                maintained]() mutable {
          Disk& disk = disks_[i];
          disk.maintenance_queued = false;
          disk.scrubbed_bytes = scrubbed;
          maintained(i, std::move(lost));
        };
      });
    }
  }
}

void DiskSet::StartCheck(DiskNo i, TimePoint now) {
  Disk& disk = disks_[i];
  disk.check_now = false;
  disk.next_check = now + options_.check_interval;
  if (disk.dir.empty()) return;  // a store without a directory (tests): nothing to check
  // Queued behind the disk's other work: only a job that runs past the timeout, the check's
  // own included, fails it (Tick), not a long queue of jobs that each finish in time.
  disk.check_queued = true;
  disk.thread->Submit(
      [i, this, dir = disk.dir, opened = disk.opened](BlockStore&) -> StorageThread::Completion {
        Status checked = CheckDiskDirectory(dir, opened);
        return [this, i, checked] {
          Disk& disk = disks_[i];
          disk.check_queued = false;
          if (!disk.failure.empty()) return;
          if (checked.ok()) return;
          if (checked.code() == StatusCode::kOutOfSpace) {
            // Full, not failed: the store refuses writes and new blocks go to the other disks.
            spdlog::debug("disk {} is full: {}", disk.path, checked.message());
            return;
          }
          Fail(i, checked.message());
        };
      });
}

void DiskSet::NoteError(DiskNo disk, const Status& status) {
  if (status.ok() || !disks_[disk].failure.empty()) return;
  // Expected answers, not the disk's failure.
  switch (status.code()) {
    case StatusCode::kNotFound:
    case StatusCode::kInvalidArgument:
    case StatusCode::kAborted:
    case StatusCode::kTooLarge:
    case StatusCode::kPermissionDenied:
      return;
    default:
      break;
  }
  disks_[disk].check_now = true;
}

void DiskSet::Fail(DiskNo i, const std::string& why) {
  Disk& disk = disks_[i];
  if (!disk.failure.empty()) return;
  disk.failure = why;
  disk.failed_flag->store(true);
  spdlog::error(
      "disk {} has failed: {}; its blocks are reported lost, the worker goes on with {} "
      "of its {} disks",
      disk.path, why, disks_.size() - failed_count(), disks_.size());
  newly_failed_.push_back(i);
}

void DiskSet::FillStats(WorkerStats& stats) const {
  stats.disk_used = 0;
  stats.disk_capacity = 0;
  stats.disk_read_only = true;
  stats.disks.clear();
  for (const Disk& disk : disks_) {
    const DiskTierStats& tier = disk.thread->stats();
    DiskStats shown{disk.path, tier.used, tier.capacity, disk.limit, DiskState::kOk, ""};
    if (!disk.failure.empty()) {
      shown.state = DiskState::kFailed;
      shown.reason = disk.failure;
      shown.used = 0;
      shown.capacity = 0;
    } else {
      if (tier.read_only) {
        shown.state = DiskState::kReadOnly;
      } else {
        stats.disk_read_only = false;
      }
      stats.disk_used += tier.used;
      stats.disk_capacity += tier.capacity;
    }
    stats.disks.push_back(std::move(shown));
  }
}

uint64_t DiskSet::corrupt_blocks() const {
  uint64_t corrupt = 0;
  for (const Disk& disk : disks_) corrupt += disk.thread->stats().corrupt_blocks;
  return corrupt;
}

uint64_t DiskSet::scrubbed_bytes() const {
  uint64_t bytes = 0;
  for (const Disk& disk : disks_) bytes += disk.scrubbed_bytes;
  return bytes;
}

}  // namespace bm
