// Uploads a client abandons: the worker releases the space it claimed for them at once, not
// after the 60 s idle timeout (PROTOCOL.md, "Uploads").

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "blockmgr/client.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMiB = 1024 * 1024;
// Heartbeats every 500 ms, so the master's view of a worker's memory is at most that old.
constexpr double kHeartbeatTimeoutSeconds = 2;

// The worker's memory in use as `bmctl --json workers` shows it; nullopt if not listed.
std::optional<uint64_t> MemoryUsed(LocalCluster& cluster, const std::string& worker) {
  CommandResult listed = cluster.Bmctl({"--json", "workers"});
  if (listed.exit_code != 0) return std::nullopt;
  for (const nlohmann::json& entry : nlohmann::json::parse(listed.out)) {
    if (entry["id"] == worker) return entry["memory_used"].get<uint64_t>();
  }
  return std::nullopt;
}

TEST(AbandonedUploadTest, ClientKilledMidUploadFreesTheWorkersClaimWithinASecond) {
  LocalCluster cluster(kHeartbeatTimeoutSeconds);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker(WorkerSpec{.id = "w1", .memory = "128MiB", .disk_limit = ""}));
  const std::string marker = (cluster.dir().path() / "stalled").string();
  // The first 16 MiB piece is sent and accepted; the source then stalls inside the second.
  Process probe = Process::Start(BinaryPath("bm-put-probe"),
                                 {"--master", cluster.master_endpoint(), "--block", "rdd_1_0",
                                  "--size", std::to_string(48 * kMiB), "--stall-after",
                                  std::to_string(20 * kMiB), "--stalled-marker", marker},
                                 (cluster.dir().path() / "probe.log").string());
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(20000)));
  // Memory is claimed as bytes arrive: at least the first piece's.
  ASSERT_TRUE(WaitFor([&] { return MemoryUsed(cluster, "w1").value_or(0) >= 16 * kMiB; },
                      milliseconds(10000)))
      << "the worker never showed the upload's claim; " << cluster.LogTail("w1");

  probe.Kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return MemoryUsed(cluster, "w1") == 0u; }, milliseconds(5000)))
      << cluster.LogTail("w1");
  const auto released = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(released, milliseconds(1000))
      << "the claim was released " << std::chrono::duration_cast<milliseconds>(released).count()
      << " ms after the kill";
  // The worker still takes a put of the same block.
  Client client(cluster.ClientOptionsFor());
  std::vector<std::byte> data(kMiB, std::byte{5});
  Result<PutResult> put = client.Put(BlockId::Rdd(1, 0), data, StorageLevel::kMemoryOnly);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
}

TEST(AbandonedUploadTest, PutWhoseSourceFailsReleasesItsClaimAtOnce) {
  LocalCluster cluster(kHeartbeatTimeoutSeconds);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker(WorkerSpec{.id = "w1", .memory = "128MiB", .disk_limit = ""}));
  Client client(cluster.ClientOptionsFor());
  // The client stays connected, so only its abortPut can release the claim before 60 s.
  uint64_t delivered = 0;
  ByteSource failing = [&](std::span<std::byte> out) -> Result<size_t> {
    if (delivered >= 20 * kMiB) return InternalError("the source broke");
    std::memset(out.data(), 1, out.size());
    delivered += out.size();
    return out.size();
  };
  Result<PutResult> put =
      client.PutStream(BlockId::Rdd(2, 0), failing, 48 * kMiB, StorageLevel::kMemoryOnly);
  ASSERT_FALSE(put.ok());
  const auto failed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        return workers.ok() && workers->size() == 1 && (*workers)[0].memory_used == 0;
      },
      milliseconds(5000)));
  EXPECT_LT(std::chrono::steady_clock::now() - failed, milliseconds(1000));
}

}  // namespace
}  // namespace bm::testing
