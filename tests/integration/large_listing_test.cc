// Listing a million blocks: `bmctl --json blocks` pages through the master's list and streams
// it, and the master holds one page at a time (PROTOCOL.md, "Listing many blocks").

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "blockmgr/client.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

#ifdef BM_SANITIZER_BUILD
constexpr uint64_t kBlocks = 100'000;  // the same paths at a scale the sanitizers finish
#else
constexpr uint64_t kBlocks = 1'000'000;
#endif

TEST(LargeListingTest, AMillionBlocksListAsJsonWithTheMastersMemoryBounded) {
#ifdef BM_ASAN_BUILD
  // AddressSanitizer holds freed memory in a quarantine (256 MiB by default), which would count
  // in the master's peak; with a small one the bound is about the master's own memory again.
  const char* asan = getenv("ASAN_OPTIONS");
  setenv("ASAN_OPTIONS",
         ((asan ? std::string(asan) + ":" : std::string()) + "quarantine_size_mb=4").c_str(), 1);
#endif
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const std::string dir = cluster.dir().path().string();
  const std::string marker = dir + "/registered";
  Process fake = Process::Start(BinaryPath("bm-fake-worker"),
                                {"--master", cluster.master_endpoint(), "--blocks",
                                 std::to_string(kBlocks), "--ready-marker", marker},
                                dir + "/fake-worker.log");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(120000)))
      << cluster.LogTail("master");

  const pid_t master = cluster.master_process().pid();
  const uint64_t peak_before = ProcStatusKiB(master, "VmHWM");
  ASSERT_GT(peak_before, 0u);
  CommandResult counted =
      RunCommand("/bin/sh",
                 {"-c", BinaryPath("bmctl") + " --master " + cluster.master_endpoint() +
                            " --json blocks | wc -l"},
                 "", std::chrono::seconds(240));
  ASSERT_EQ(counted.exit_code, 0) << counted.err;
  // "[", one line per block, "]".
  EXPECT_EQ(std::stoull(counted.out), kBlocks + 2);
  const uint64_t peak_after = ProcStatusKiB(master, "VmHWM");
  // A page is ~10,000 blocks (about 2 MB of reply); listing everything at once took hundreds.
  EXPECT_LT(peak_after - peak_before, 64u * 1024)
      << "VmHWM grew from " << peak_before << " KiB to " << peak_after << " KiB";

  // In id order across the pages: the first block line is rdd_1_0, the last rdd_1_<kBlocks - 1>.
  CommandResult ends = RunCommand(
      "/bin/sh",
      {"-c", BinaryPath("bmctl") + " --master " + cluster.master_endpoint() +
                 " --json blocks | sed -n '2p' && " + BinaryPath("bmctl") + " --master " +
                 cluster.master_endpoint() + " --json blocks | tail -n 2 | head -n 1"},
      "", std::chrono::seconds(240));
  ASSERT_EQ(ends.exit_code, 0) << ends.err;
  const size_t newline = ends.out.find('\n');
  ASSERT_NE(newline, std::string::npos) << ends.out;
  EXPECT_NE(ends.out.substr(0, newline).find("\"rdd_1_0\""), std::string::npos) << ends.out;
  const std::string last = "\"rdd_1_" + std::to_string(kBlocks - 1) + "\"";
  EXPECT_NE(ends.out.substr(newline).find(last), std::string::npos) << ends.out;

  // Locations of all of them at once: asked in batches, answered in full.
  std::vector<BlockId> ids;
  ids.reserve(kBlocks);
  for (uint64_t p = 0; p < kBlocks; ++p) ids.push_back(BlockId::Rdd(1, p));
  Client client(cluster.ClientOptionsFor());
  Result<std::vector<BlockLocations>> where = client.Locations(ids);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  ASSERT_EQ(where->size(), kBlocks);
  EXPECT_EQ((*where)[kBlocks - 1].block, BlockId::Rdd(1, kBlocks - 1));
  EXPECT_EQ((*where)[kBlocks - 1].locations.size(), 1u);
}

}  // namespace
}  // namespace bm::testing
