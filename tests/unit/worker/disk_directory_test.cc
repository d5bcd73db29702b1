#include "worker/disk/disk_directory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "worker/disk_set.h"

namespace bm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DistinctDirectoriesTest, DifferentDirectoriesAreAccepted) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Sub("a"));
  std::filesystem::create_directories(dir.Sub("b"));
  const std::vector<std::string> paths{dir.Sub("a"), dir.Sub("b"), dir.Sub("not-yet")};
  EXPECT_TRUE(CheckDistinctDirectories(paths).ok());
}

TEST(DistinctDirectoriesTest, OneDirectoryInTwoSpellingsIsRefusedNamingBoth) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.Sub("d"));
  std::filesystem::create_directory_symlink(dir.Sub("d"), dir.Sub("link"));
  for (const std::string& other :
       {dir.Sub("d") + "/", dir.Sub("d") + "/.", dir.Sub("link"), dir.Sub("x/../d")}) {
    std::filesystem::create_directories(dir.Sub("x"));
    const std::vector<std::string> paths{dir.Sub("d"), other};
    Status distinct = CheckDistinctDirectories(paths);
    EXPECT_EQ(distinct.code(), StatusCode::kInvalidArgument) << other;
    EXPECT_THAT(distinct.message(),
                AllOf(HasSubstr("--disk-dir " + dir.Sub("d") + " and --disk-dir " + other),
                      HasSubstr("same directory")));
  }
}

TEST(DistinctDirectoriesTest, ADirectoryNotCreatedYetInTwoSpellingsIsRefused) {
  testing::TempDir dir;
  const std::vector<std::string> paths{dir.Sub("new"), dir.Sub("new") + "/"};
  EXPECT_EQ(CheckDistinctDirectories(paths).code(), StatusCode::kInvalidArgument);
}

TEST(DiskDirectoryLockTest, ASecondLockOnTheSameDirectoryIsRefusedUntilTheFirstGoes) {
  testing::TempDir dir;
  const std::string disk = dir.path().string();
  Result<std::unique_ptr<DiskDirectoryLock>> first = DiskDirectoryLock::Acquire(disk);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // flock(2) locks conflict between two opens in one process too (fcntl locks do not).
  Result<std::unique_ptr<DiskDirectoryLock>> second = DiskDirectoryLock::Acquire(disk + "/");
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another disk store"));
  first->reset();
  EXPECT_TRUE(DiskDirectoryLock::Acquire(disk).ok());
}

// The directory as the worker opened it: locked, its identity recorded.
class VanishingDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(disk_);
    Result<std::unique_ptr<DiskDirectoryLock>> lock = DiskDirectoryLock::Acquire(disk_);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    lock_ = std::move(lock).value();
    Result<OpenedDirectory> opened = IdentifyDiskDirectory(disk_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    opened_ = *opened;
    ASSERT_TRUE(opened_.lock_file.has_value());
    EXPECT_EQ(*opened_.lock_file, lock_->opened().lock_file);
    ASSERT_TRUE(CheckDiskDirectory(disk_, opened_).ok());
  }

  testing::TempDir dir_;
  const std::string disk_ = dir_.Sub("disk");
  std::unique_ptr<DiskDirectoryLock> lock_;
  OpenedDirectory opened_;
};

// What an unmounted disk looks like: the bare mount point, an empty directory, where the disk's
// directory was. Writing the check file there succeeds; the check must not.
TEST_F(VanishingDirectoryTest, ADirectoryReplacedByAnotherFailsTheCheck) {
  std::filesystem::rename(disk_, dir_.Sub("moved-away"));
  std::filesystem::create_directories(disk_);
  Status checked = CheckDiskDirectory(disk_, opened_);
  EXPECT_EQ(checked.code(), StatusCode::kInternal) << checked.ToString();
  EXPECT_THAT(checked.message(), AllOf(HasSubstr(disk_), HasSubstr("no longer the one opened")));
  // Nothing was written into the directory that took its place.
  EXPECT_TRUE(std::filesystem::is_empty(disk_));
}

TEST_F(VanishingDirectoryTest, ADirectoryMovedAwayWithAFileInItsPlaceFailsTheCheck) {
  std::filesystem::rename(disk_, dir_.Sub("moved-away"));
  testing::WriteFile(disk_, "not a disk");
  Status checked = CheckDiskDirectory(disk_, opened_);
  EXPECT_EQ(checked.code(), StatusCode::kInternal) << checked.ToString();
  EXPECT_THAT(checked.message(), HasSubstr("no longer the one opened"));
}

TEST_F(VanishingDirectoryTest, ADeletedLockFileFailsTheCheck) {
  std::filesystem::remove(std::filesystem::path(disk_) / DiskDirectoryLock::kLockFileName);
  Status checked = CheckDiskDirectory(disk_, opened_);
  EXPECT_EQ(checked.code(), StatusCode::kInternal) << checked.ToString();
  EXPECT_THAT(checked.message(), HasSubstr("lock file"));
}

}  // namespace
}  // namespace bm
