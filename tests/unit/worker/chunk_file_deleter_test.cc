#include "worker/disk/chunk_file_deleter.h"

#include <gtest/gtest.h>
#include <rocksdb/file_system.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace bm::disk {
namespace {

using namespace std::chrono_literals;

// A file system whose deletions hang until released: a disk stuck in unlink(2).
class HangingDeletesFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  HangingDeletesFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "HangingDeletesFileSystem"; }

  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    {
      std::unique_lock lock(mutex_);
      started_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return released_; });
    }
    return FileSystemWrapper::DeleteFile(name, options, dbg);
  }

  void AwaitStarted() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return started_; });
  }
  void Release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool started_ = false;
  bool released_ = false;
};

TEST(ChunkFileDeleterTest, DestroyingItDeletesWhatIsQueued) {
  testing::TempDir dir;
  for (int i = 0; i < 3; ++i) testing::WriteFile(dir.Sub(std::to_string(i)), "bytes");
  {
    ChunkFileDeleter deleter(rocksdb::FileSystem::Default().get());
    for (int i = 0; i < 3; ++i) deleter.Delete(dir.Sub(std::to_string(i)), 5);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// The worker's shutdown destroys the deleter: a deletion stuck on a hung disk must not hold it.
TEST(ChunkFileDeleterTest, DestroyingItDoesNotWaitForADeletionStuckOnAHungDisk) {
  testing::TempDir dir;
  testing::WriteFile(dir.Sub("stuck"), "bytes");
  testing::WriteFile(dir.Sub("next"), "bytes");
  // Outlives the abandoned thread, which returns once released below.
  static HangingDeletesFileSystem fs;
  auto deleter = std::make_unique<ChunkFileDeleter>(&fs, 200ms);
  deleter->Delete(dir.Sub("stuck"), 5);
  deleter->Delete(dir.Sub("next"), 5);
  fs.AwaitStarted();
  std::future<void> destroyed = std::async(std::launch::async, [&deleter] { deleter.reset(); });
  const bool returned = destroyed.wait_for(10s) == std::future_status::ready;
  fs.Release();  // lets the thread (abandoned, or still joined by a hanging destructor) finish
  destroyed.wait();
  EXPECT_TRUE(returned) << "the destructor waited for the hung deletion";
}

}  // namespace
}  // namespace bm::disk
