#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>

#include "common/core/protocol.h"
#include "common/core/worker_stats.h"

namespace bm {
namespace {

WorkerStats RoundTrip(const WorkerStats& stats) {
  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::WorkerStats>();
  ToProto(stats, builder);
  return FromProto(builder.asReader());
}

TEST(WorkerStatsProtoTest, EachDiskRoundTrips) {
  WorkerStats stats{.memory_capacity = 10, .disk_used = 30, .disk_capacity = 300};
  stats.disks = {{"/data1", 30, 100, 100, DiskState::kOk, ""},
                 {"/data2", 0, 200, 0, DiskState::kReadOnly, ""},
                 {"/data3", 0, 0, 0, DiskState::kFailed, "writing: Input/output error"}};
  EXPECT_EQ(RoundTrip(stats), stats);
}

TEST(WorkerStatsProtoTest, AWorkerWithoutTheListReadsAsNoDisks) {
  EXPECT_TRUE(RoundTrip(WorkerStats{.disk_used = 5}).disks.empty());
}

TEST(WorkerStatsProtoTest, AnOversizedListAndLongTextsAreCut) {
  WorkerStats stats;
  for (size_t i = 0; i < kMaxDisksShown + 10; ++i) {
    stats.disks.push_back(
        {"/d" + std::to_string(i), 0, 0, 0, DiskState::kFailed, std::string(5000, 'x')});
  }
  const WorkerStats read = RoundTrip(stats);
  ASSERT_EQ(read.disks.size(), kMaxDisksShown);
  EXPECT_EQ(read.disks[0].reason.size(), 1024u);
}

}  // namespace
}  // namespace bm
