#include "bmctl/output.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

using json = nlohmann::ordered_json;

std::vector<BlockLocations> TwoBlocks() {
  return {
      {BlockId::Rdd(1, 0),
       StorageLevel::kMemoryOnly,
       {{"w1", "tcp://10.0.0.1:7701", Tier::kMemory, 123},
        {"w2", "tcp://10.0.0.2:7701", Tier::kDisk, 123}},
       0x0123456789abcdef},
      {BlockId::Broadcast(9), StorageLevel::kDiskOnly2, {}},
  };
}

TEST(BmctlOutputTest, LocationsJsonShape) {
  json expected = json::parse(R"([
    {"block": "rdd_1_0", "locations": [
      {"worker": "w1", "address": "tcp://10.0.0.1:7701", "tier": "memory", "size": 123},
      {"worker": "w2", "address": "tcp://10.0.0.2:7701", "tier": "disk", "size": 123}],
     "digest": "0123456789abcdef"},
    {"block": "broadcast_9", "locations": [], "digest": null}
  ])");
  EXPECT_EQ(LocationsToJson(TwoBlocks()), expected);
}

TEST(BmctlOutputTest, BlocksJsonShape) {
  json out = BlocksToJson(TwoBlocks());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["block"], "rdd_1_0");
  EXPECT_EQ(out[0]["level"], "MEMORY_ONLY");
  EXPECT_EQ(out[0]["locations"], LocationsToJson(TwoBlocks())[0]["locations"]);
  EXPECT_EQ(out[1]["level"], "DISK_ONLY_2");
  EXPECT_TRUE(out[1]["locations"].is_array());
  EXPECT_EQ(out[0]["copies_wanted"], 1);
  EXPECT_EQ(out[1]["copies_wanted"], 2);
  EXPECT_EQ(out[0]["digest"], "0123456789abcdef");
  EXPECT_TRUE(out[1]["digest"].is_null());
  EXPECT_EQ(out[0].size(), 5u);
}

TEST(BmctlOutputTest, WorkersJsonShape) {
  WorkerInfo w;
  w.id = "w1";
  w.address = "tcp://10.0.0.1:7701";
  w.memory_capacity = 4096;
  w.memory_used = 1024;
  w.memory_pinned = 512;
  w.disk_used = 77;
  w.disk_capacity = 1 << 20;
  w.block_count = 3;
  w.last_heartbeat_age_ms = 12;
  w.host = "h1";
  w.rack = "r1";
  w.state = WorkerState::kUnconfirmed;
  w.disks = {{"/data1", 77, 1 << 20, 1 << 20, "ok", ""}};
  json expected = json::parse(R"([{"id": "w1", "address": "tcp://10.0.0.1:7701",
    "memory_capacity": 4096, "memory_used": 1024, "memory_pinned": 512, "disk_used": 77,
    "disk_capacity": 1048576, "disk_read_only": false, "blocks": 3,
    "host": "h1", "rack": "r1", "state": "unconfirmed",
    "disks": [{"path": "/data1", "used": 77, "capacity": 1048576, "limit": 1048576,
               "state": "ok", "reason": ""}]}])");
  EXPECT_EQ(WorkersToJson({w}), expected);
}

TEST(BmctlOutputTest, WorkersTableShowsAReadOnlyDisk) {
  WorkerInfo w;
  w.id = "w1";
  w.disk_used = 5 << 20;
  w.disk_capacity = 5 << 20;
  w.disk_read_only = true;
  EXPECT_NE(WorkersTable({w}).find("read-only"), std::string::npos) << WorkersTable({w});
}

TEST(BmctlOutputTest, WorkersTableListsEachDiskAndWhyOneFailed) {
  WorkerInfo w;
  w.id = "w1";
  w.disks = {{"/data1", 5 << 20, 100 << 20, 0, "ok", ""},
             {"/data2", 0, 0, 200 << 20, "failed", "writing /data2/.bm-disk-check: I/O error"}};
  const std::string table = WorkersTable({w});
  EXPECT_NE(table.find("/data1"), std::string::npos) << table;
  EXPECT_NE(table.find("failed"), std::string::npos) << table;
  EXPECT_NE(table.find("I/O error"), std::string::npos) << table;
}

TEST(BmctlOutputTest, WorkersTableOmitsTheDiskListForOneHealthyDisk) {
  WorkerInfo w;
  w.id = "w1";
  w.disks = {{"/data1", 5 << 20, 100 << 20, 0, "ok", ""}};
  EXPECT_EQ(WorkersTable({w}).find("/data1"), std::string::npos) << WorkersTable({w});
}

TEST(BmctlOutputTest, RddsJsonShape) {
  RddInfo rdd{1, "counts", StorageLevel::kMemoryAndDisk, 8, 4, 1000, 2000, {"w1", "w2"}};
  json expected = json::parse(R"([{"rdd": 1, "name": "counts", "level": "MEMORY_AND_DISK",
    "cached_partitions": 4, "total_partitions": 8, "memory_bytes": 1000,
    "disk_bytes": 2000, "workers": ["w1", "w2"]}])");
  EXPECT_EQ(RddsToJson({rdd}), expected);
}

TEST(BmctlOutputTest, EmptyListsAreEmptyJsonArrays) {
  EXPECT_EQ(WorkersToJson({}).dump(), "[]");
  EXPECT_EQ(RddsToJson({}).dump(), "[]");
  EXPECT_EQ(BlocksToJson({}).dump(), "[]");
  EXPECT_EQ(LocationsToJson({}).dump(), "[]");
  EXPECT_EQ(RddsToJson({RddInfo{}})[0]["workers"].dump(), "[]");
}

TEST(BmctlOutputTest, RemovedAndPutJsonShapes) {
  EXPECT_EQ(RemovedToJson(5).dump(), R"({"removed":5})");
  PutResult put{"w2", "tcp://10.0.0.2:7701", Tier::kDisk, 42, {"w2", "w1"}, 2};
  EXPECT_EQ(PutToJson(BlockId::Rdd(3, 1), put).dump(),
            R"({"block":"rdd_3_1","worker":"w2","tier":"disk","size":42,)"
            R"("replicas":["w2","w1"],"copies_wanted":2})");
}

TEST(BmctlOutputTest, PutTextNamesEveryCopyWhenReplicated) {
  PutResult single{"w1", "tcp://h:1", Tier::kMemory, 2048, {"w1"}, 1};
  EXPECT_EQ(PutText(BlockId::Rdd(1, 0), single),
            "stored rdd_1_0 (2.0 KiB) on w1 (tcp://h:1) in memory\n");
  PutResult short_of_copies{"w1", "tcp://h:1", Tier::kMemory, 2048, {"w1"}, 2};
  EXPECT_EQ(PutText(BlockId::Rdd(1, 0), short_of_copies),
            "stored rdd_1_0 (2.0 KiB) on w1 (tcp://h:1) in memory; 1 of 2 copies: w1\n");
}

TEST(BmctlOutputTest, TableAlignsColumnsWithoutTrailingBlanks) {
  std::string table = FormatTable({{"NAME"}, {"SIZE", true}, {"NOTE"}},
                                  {{"a", "1 B", "x"}, {"longer", "10.0 MiB", ""}});
  EXPECT_EQ(table,
            "NAME        SIZE  NOTE\n"
            "a            1 B  x\n"
            "longer  10.0 MiB\n");
}

TEST(BmctlOutputTest, LocationsTableListsEveryCopyAndMissingBlocks) {
  EXPECT_EQ(
      LocationsTable(TwoBlocks()),
      "BLOCK        WORKER  ADDRESS                          TIER     SIZE  DIGEST\n"
      "rdd_1_0      w1      tcp://10.0.0.1:7701              memory  123 B  0123456789abcdef\n"
      "rdd_1_0      w2      tcp://10.0.0.2:7701              disk    123 B  0123456789abcdef\n"
      "broadcast_9  -       (not stored on any live worker)\n");
}

TEST(BmctlOutputTest, WorkersTableFormatsSizesAndUnlimitedDisk) {
  WorkerInfo w;
  w.id = "w1";
  w.address = "tcp://h:1";
  w.memory_capacity = 4ull << 30;
  w.memory_used = 3ull << 29;
  w.block_count = 2;
  w.last_heartbeat_age_ms = 5;
  std::string table = WorkersTable({w});
  EXPECT_NE(table.find("1.5 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("4.0 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("unlimited"), std::string::npos) << table;
  EXPECT_EQ(table.substr(0, table.find('\n')),
            "WORKER  ADDRESS    STATE   HOST  RACK  MEM USED  MEM CAPACITY  MEM PINNED  DISK USED  "
            "DISK LIMIT  BLOCKS  HEARTBEAT");
  // No labels: a dash, as for other empty cells.
  EXPECT_NE(table.find("active  -     -"), std::string::npos) << table;
}

TEST(BmctlOutputTest, BlocksAndRddsTables) {
  EXPECT_EQ(BlocksTable(TwoBlocks()),
            "BLOCK        LEVEL         SIZE  COPIES  LOCATIONS           DIGEST\n"
            "rdd_1_0      MEMORY_ONLY  123 B     2/1  w1:memory, w2:disk  0123456789abcdef\n"
            "broadcast_9  DISK_ONLY_2      -     0/2  -                   -\n");
  std::vector<BlockLocations> short_of_one = {
      {BlockId::Rdd(2, 0), StorageLevel::kMemoryAndDisk2, {{"w1", "tcp://h:1", Tier::kDisk, 5}}}};
  EXPECT_EQ(BlocksTable(short_of_one),
            "BLOCK    LEVEL              SIZE  COPIES  LOCATIONS  DIGEST\n"
            "rdd_2_0  MEMORY_AND_DISK_2   5 B     1/2  w1:disk    -\n"
            "1 of 1 blocks are under-replicated\n");
  EXPECT_EQ(RddsTable({RddInfo{7, "counts", StorageLevel::kMemoryOnly, 16, 2, 2048, 0, {"w1"}},
                       RddInfo{9, "", StorageLevel::kDiskOnly, 0, 1, 0, 5, {}}}),
            "RDD  NAME    LEVEL        CACHED   MEMORY  DISK  WORKERS\n"
            "  7  counts  MEMORY_ONLY    2/16  2.0 KiB   0 B  w1\n"
            "  9  -       DISK_ONLY         1      0 B   5 B  -\n");
}

TEST(BmctlOutputTest, OneLineSummaries) {
  EXPECT_EQ(RemovedText(1), "removed 1 block\n");
  EXPECT_EQ(RemovedText(0), "removed 0 blocks\n");
  EXPECT_EQ(PutText(BlockId::Rdd(1, 0), PutResult{"w1", "tcp://h:1", Tier::kMemory, 2048}),
            "stored rdd_1_0 (2.0 KiB) on w1 (tcp://h:1) in memory\n");
}

}  // namespace
}  // namespace bm
