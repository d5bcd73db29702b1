#include <gtest/gtest.h>

#include <string>

#include "worker/worker_status.h"

namespace bm {
namespace {

TEST(WorkerMetricsTest, EachDiskIsALabelAndAFailedOneIsCounted) {
  WorkerSnapshot snapshot;
  snapshot.disks = {{"/data1", 300, 1000, 1000, DiskState::kOk, ""},
                    {"/data2", 0, 0, 0, DiskState::kFailed, "I/O error"},
                    {"/data3", 10, 10, 0, DiskState::kReadOnly, ""}};
  const std::string text = WorkerMetricsText(snapshot);
  for (const char* line : {"blockmgr_worker_disk_used_bytes{disk=\"/data1\"} 300",
                           "blockmgr_worker_disk_capacity_bytes{disk=\"/data1\"} 1000",
                           "blockmgr_worker_disk_failed{disk=\"/data1\"} 0",
                           "blockmgr_worker_disk_failed{disk=\"/data2\"} 1",
                           "blockmgr_worker_disk_read_only{disk=\"/data3\"} 1",
                           "blockmgr_worker_disks_failed_total 1"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace bm
