// Memory pressure is a cache's normal state: a put that evicts a GiB of MEMORY_AND_DISK blocks
// spills them in the background, on the worker's storage thread, while the worker goes on
// answering its clients and heartbeating the master.

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMiB = 1024 * 1024;

// Bytes no two blocks share, cheap to make and to check: a 64-bit counter mixed with the seed.
std::vector<std::byte> Pattern(uint64_t size, uint64_t seed) {
  std::vector<std::byte> bytes(size);
  for (uint64_t i = 0; i + 8 <= size; i += 8) {
    uint64_t word = (i / 8 + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xD1B54A32D192ED03ull;
    word ^= word >> 29;
    std::memcpy(bytes.data() + i, &word, 8);
  }
  return bytes;
}

// The latest any of the worker's heartbeats went out against when it was due, from its
// /metrics (blockmgr_worker_heartbeat_delay_max_seconds); a negative value if unreadable.
double WorstHeartbeatDelaySeconds(int http_port) {
  httplib::Client http("127.0.0.1", http_port);
  httplib::Result metrics = http.Get("/metrics");
  if (!metrics || metrics->status != 200) return -1;
  const std::string name = "\nblockmgr_worker_heartbeat_delay_max_seconds ";
  const size_t at = metrics->body.find(name);
  return at == std::string::npos ? -1 : std::atof(metrics->body.c_str() + at + name.size());
}

#ifdef BM_SANITIZER_BUILD
// The same paths at a quarter of the bytes: under ThreadSanitizer 2 GiB through the worker took
// longer than the test's time limit.
constexpr uint64_t kScale = 4;
// A sanitizer slows the worker's loop as much as everything else: under ThreadSanitizer, at the
// start of a whole suite, a heartbeat went 1.18 s late with nothing stalled. A loop stalled on
// the spills is late by all of them together (about half a GiB to disk at a quarter of the
// bytes), several seconds, so a 3 s timeout still catches it.
constexpr int kHeartbeatTimeoutSeconds = 3;
#else
constexpr uint64_t kScale = 1;
constexpr int kHeartbeatTimeoutSeconds = 1;
#endif

TEST(MemoryPressureTest, GibibytePutSpillsInTheBackgroundAndTheWorkerIsNeverDropped) {
  // A short heartbeat timeout: a worker whose loop stalled on the spill would be dropped.
  LocalCluster cluster(kHeartbeatTimeoutSeconds);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker(WorkerSpec{.id = "w1",
                                     .memory = std::to_string(1024 / kScale) + "MiB",
                                     .disk_limit = "",
                                     .extra_args = {"--http", "127.0.0.1:0"}}));
  const int w1_http = cluster.HttpPort("w1");
  ASSERT_GT(w1_http, 0) << cluster.LogTail("w1");
  Client client(cluster.ClientOptionsFor());

  constexpr int kCachedBlocks = 15;
  for (int i = 0; i < kCachedBlocks; ++i) {
    Result<PutResult> put = client.Put(BlockId::Rdd(1, i), Pattern(64 * kMiB / kScale, i),
                                       StorageLevel::kMemoryAndDisk);
    ASSERT_TRUE(put.ok()) << i << ": " << put.status().ToString();
  }

  // The new user's reproduction: a 1 GiB file put with bmctl, default timeouts.
  const std::string file = (cluster.dir().path() / "big.bin").string();
  const std::vector<std::byte> big = Pattern(1024 * kMiB / kScale, 100);
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(big.data()), static_cast<std::streamsize>(big.size()));
    ASSERT_TRUE(out.good());
  }
  CommandResult put = cluster.Bmctl({"put", "rdd_2_0", file, "--level", "MEMORY_AND_DISK"});
  ASSERT_EQ(put.exit_code, 0) << put.out << put.err << cluster.LogTail("w1");

  // Every evicted block spills to disk; the worker is listed throughout.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::map<std::string, std::vector<std::tuple<std::string, std::string, uint64_t>>> where =
            cluster.Locations({"rdd_1_14"});
        return !where["rdd_1_14"].empty() && std::get<1>(where["rdd_1_14"][0]) == "disk";
      },
      milliseconds(60000)))
      << cluster.LogTail("w1");
  EXPECT_EQ(cluster.ListedWorkers(), std::vector<std::string>{"w1"});
  EXPECT_EQ(ReadFile(cluster.dir().Sub("master.log")).find("dropped worker"), std::string::npos)
      << cluster.LogTail("master");

  // Byte-exact, from whichever tier each block is on now.
  for (int i = 0; i < kCachedBlocks; ++i) {
    Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_TRUE(*got == Pattern(64 * kMiB / kScale, i)) << "rdd_1_" << i << " differs";
  }
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(2, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == big) << "rdd_2_0 differs";
  EXPECT_EQ(ReadFile(cluster.dir().Sub("master.log")).find("dropped worker"), std::string::npos);

  // How late the worker's heartbeats went while 2 GiB moved through it (issue 32: under
  // ThreadSanitizer they were over a second late). Loosely: under the master's timeout.
  const double worst = WorstHeartbeatDelaySeconds(w1_http);
  std::cout << "worst heartbeat delay on w1: " << worst * 1000 << " ms\n";
  RecordProperty("worst_heartbeat_delay_ms", std::to_string(worst * 1000));
  EXPECT_GE(worst, 0) << "no blockmgr_worker_heartbeat_delay_max_seconds on w1's /metrics";
  EXPECT_LT(worst, kHeartbeatTimeoutSeconds);
}

}  // namespace
}  // namespace bm::testing
