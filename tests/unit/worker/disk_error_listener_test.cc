#include "worker/disk/disk_error_listener.h"

#include <gtest/gtest.h>

namespace bm::disk {
namespace {

// RocksDB asks its listeners before it recovers from a background error by itself (on a full
// disk, its SstFileManager would resume writing once space shows up: into a database that
// reported an error, and into whatever replaced an unmounted disk's directory). The store's
// listener says no: recovery is the store's reopen, after it checked the directory.
TEST(DiskErrorListenerTest, RefusesRocksDbsOwnRecoveryFromAnyError) {
  ErrorListener listener;
  for (const rocksdb::Status& error :
       {rocksdb::Status::NoSpace("disk full"), rocksdb::Status::IOError("write failed")}) {
    bool auto_recovery = true;
    listener.OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason::kWriteCallback, error,
                                  &auto_recovery);
    EXPECT_FALSE(auto_recovery) << error.ToString();
  }
}

TEST(DiskErrorListenerTest, KeepsTheFirstBackgroundErrorForTheStore) {
  ErrorListener listener;
  EXPECT_FALSE(listener.failed());
  rocksdb::Status first = rocksdb::Status::NoSpace("injected: disk full");
  rocksdb::Status second = rocksdb::Status::IOError("later");
  listener.OnBackgroundError(rocksdb::BackgroundErrorReason::kFlush, &first);
  listener.OnBackgroundError(rocksdb::BackgroundErrorReason::kCompaction, &second);
  EXPECT_TRUE(listener.failed());
  EXPECT_EQ(listener.message(), first.ToString());
}

}  // namespace
}  // namespace bm::disk
