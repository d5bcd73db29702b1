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

TEST(WorkerMetricsTest, ShufflePushesAndReadsAreCountedWithTheirOwnOps) {
  WorkerSnapshot snapshot;
  snapshot.counters.shuffle_pieces_pushed = 7;
  snapshot.counters.shuffle_bytes_pushed = 7000;
  snapshot.counters.shuffle_bytes_read = 3000;
  snapshot.counters.RecordRequest(WorkerOp::kShufflePush, Status::Ok(),
                                  std::chrono::microseconds(80));
  const std::string text = WorkerMetricsText(snapshot);
  for (const char* line :
       {"blockmgr_worker_shuffle_pieces_pushed_total 7",
        "blockmgr_worker_shuffle_pushed_bytes_total 7000",
        "blockmgr_worker_shuffle_read_bytes_total 3000", "op=\"shuffle_push\""}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace bm
