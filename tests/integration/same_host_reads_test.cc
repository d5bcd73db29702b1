// Same-host reads (docs/storage.md "Same-host reads"): a client on a worker's host maps the
// worker's sealed region of a block instead of receiving it over TCP. What the mapping promises
// (its bytes never change, the memory comes back when it goes, it cannot be written), what pins it
// (removal, overwrite and eviction wait for it; a reader's death or the pin lifetime releases
// it), and who may open the socket at all.

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "blockmgr/client.h"
#include "client/local_reads.h"
#include "common/core/protocol.h"
#include "common/net/local_socket.h"
#include "common/net/transport.h"
#include "common/security/curve_keys.h"
#include "schema/local_reads.capnp.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace bm {
namespace {

using namespace bm::testing;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kMiB = 1 << 20;

// One series of a worker's /metrics ("blockmgr_worker_pins"); -1 when unreadable.
double Metric(int http_port, const std::string& series) {
  httplib::Client http("127.0.0.1", http_port);
  httplib::Result metrics = http.Get("/metrics");
  if (!metrics || metrics->status != 200) return -1;
  const std::string line = "\n" + series + " ";
  const size_t at = metrics->body.find(line);
  return at == std::string::npos ? -1 : std::atof(metrics->body.c_str() + at + line.size());
}

bool AwaitMetric(int http_port, const std::string& series, double value) {
  return WaitFor([&] { return Metric(http_port, series) == value; }, milliseconds(10000));
}

std::vector<std::byte> Bytes(const BlockData& data) { return data.Flatten(); }

// The offer openLocalReads gets from the worker, as key `key_name` (keys on) would.
Result<std::pair<std::string, std::string>> AskForTicket(zmq::context_t& context,
                                                         const std::string& endpoint,
                                                         const ChannelSecurity& security) {
  RpcChannel channel(context, endpoint, seconds(3), security);
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setOpenLocalReads();
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(message));
  std::pair<std::string, std::string> offer;
  BM_RETURN_IF_ERROR(ReadGuarded([&]() -> Status {
    proto::Reply::Reader r = reply.reply();
    if (r.isError()) return StatusFromError(r.getError());
    offer.first = r.getLocalReads().getSocketPath();
    capnp::Data::Reader ticket = r.getLocalReads().getTicket();
    offer.second.assign(reinterpret_cast<const char*>(ticket.begin()), ticket.size());
    return Status::Ok();
  }));
  return offer;
}

class SameHostReadsTest : public ::testing::Test {
 protected:
  // w1 with --http and `extra` arguments.
  void StartWorker(const std::string& memory, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--http", "127.0.0.1:0"});
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(
        WorkerSpec{.id = "w1", .memory = memory, .disk_limit = "", .extra_args = extra}));
    http_ = cluster_.HttpPort("w1");
    ASSERT_GT(http_, 0) << cluster_.LogTail("w1");
  }
  void Put(Client& client, const std::string& block, const std::vector<std::byte>& bytes,
           StorageLevel level = StorageLevel::kMemoryOnly) {
    Result<PutResult> put = client.Put(*BlockId::Parse(block), bytes, level);
    ASSERT_TRUE(put.ok()) << block << ": " << put.status().ToString();
  }

  // A client that unmaps a region as soon as its last caller lets go (no idle mappings kept),
  // for the tests of what pins a block and when it is let go.
  ClientOptions UnmappingAtOnce() {
    ClientOptions options = cluster_.ClientOptionsFor();
    options.idle_mapping_bytes = 0;
    return options;
  }

  LocalCluster cluster_;
  int http_ = 0;
};

TEST_F(SameHostReadsTest, GetMapsTheWorkersSealedRegionAndNoByteCrossesTcp) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(UnmappingAtOnce());
  const std::vector<std::byte> memory = RandomByteVector(4 * kMiB, 1);
  const std::vector<std::byte> disk = RandomByteVector(3 * kMiB + 5, 2);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", memory));
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_1", disk, StorageLevel::kDiskOnly));
  {
    Result<BlockData> from_memory = client.GetChunks(BlockId::Rdd(1, 0));
    Result<BlockData> from_disk = client.GetChunks(BlockId::Rdd(1, 1));
    ASSERT_TRUE(from_memory.ok()) << from_memory.status().ToString();
    ASSERT_TRUE(from_disk.ok()) << from_disk.status().ToString();
    ASSERT_EQ(from_memory->chunks.size(), 1u);
    EXPECT_TRUE(Bytes(*from_memory) == memory);
    EXPECT_TRUE(Bytes(*from_disk) == disk);
    // The bytes are the worker's memfd, mapped here: no copy of them came over a socket.
    const std::string maps = ReadFile("/proc/self/maps");
    EXPECT_NE(maps.find("/memfd:bm-block rdd_1_0"), std::string::npos) << maps;
    EXPECT_NE(maps.find("/memfd:bm-block rdd_1_1"), std::string::npos) << maps;
    EXPECT_EQ(Metric(http_, "blockmgr_worker_block_reads_total{origin=\"local\"}"), 2);
    EXPECT_EQ(Metric(http_, "blockmgr_worker_local_read_bytes_total"),
              static_cast<double>(memory.size() + disk.size()));
    EXPECT_EQ(Metric(http_, "blockmgr_worker_pinned_bytes"),
              static_cast<double>(memory.size() + disk.size()));
    EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 2);
    // Get and GetTo read the same way, copying once.
    Result<std::vector<std::byte>> copied = client.Get(BlockId::Rdd(1, 0));
    ASSERT_TRUE(copied.ok());
    EXPECT_TRUE(*copied == memory);
  }
  // A mapping dropped on another thread than its client's (a Python buffer freed by the
  // garbage collector, say) tells the worker all the same.
  Result<BlockData> elsewhere = client.GetChunks(BlockId::Rdd(1, 0));
  ASSERT_TRUE(elsewhere.ok());
  std::thread([held = std::move(elsewhere).value()]() mutable { held = BlockData(); }).join();
  // Unmapped: the worker hears it and stops counting the pages.
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 0));
  EXPECT_EQ(Metric(http_, "blockmgr_worker_block_reads_total{origin=\"remote\"}"), 0);
}

TEST_F(SameHostReadsTest, GetManyChunksReadsSmallBigDiskAndMissingBlocksThroughTheSocket) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> stored;
  for (int i = 0; i < 40; ++i) {  // small ones: more than one getMany, some past its room
    ids.push_back(BlockId::Rdd(1, i));
    stored.push_back(RandomByteVector(i == 7 ? 0 : 1000 + 997 * i, i));
    ASSERT_NO_FATAL_FAILURE(Put(client, ids.back().ToString(), stored.back()));
  }
  ids.push_back(BlockId::Rdd(2, 0));  // mapped
  stored.push_back(RandomByteVector(3 * kMiB, 50));
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_2_0", stored.back()));
  ids.push_back(BlockId::Rdd(3, 0));  // on disk
  stored.push_back(RandomByteVector(5000, 51));
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_3_0", stored.back(), StorageLevel::kDiskOnly));
  ids.push_back(BlockId::Rdd(4, 0));                                 // never stored
  std::vector<Result<BlockData>> first = client.GetManyChunks(ids);  // locations learned
  std::vector<Result<BlockData>> got = client.GetManyChunks(ids);    // through the socket
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    EXPECT_TRUE(Bytes(*got[i]) == stored[i]) << ids[i].ToString();
  }
  EXPECT_EQ(got.back().status().code(), StatusCode::kNotFound);
  // The second pass went through the socket: every stored block counted once more as local.
  EXPECT_GE(Metric(http_, "blockmgr_worker_local_read_bytes_total"), 3.0 * kMiB);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_block_reads_total{origin=\"remote\"}"), 0);
}

TEST_F(SameHostReadsTest, ABigBlocksFirstReaderReadsOverTcpWhileTheBlockIsMovedForTheNext) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("256MiB"));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(80 * kMiB, 12);  // over 64 MiB
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  // Not waited for: the first read goes over TCP while the worker copies the block.
  Result<std::vector<std::byte>> first = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first == bytes);
  std::optional<BlockData> mapped;
  ASSERT_TRUE(WaitFor(
      [&] {
        mapped = client.GetMapped(BlockId::Rdd(1, 0));
        return mapped.has_value();
      },
      milliseconds(20000)));
  EXPECT_TRUE(Bytes(*mapped) == bytes);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pinned_bytes"), 80.0 * kMiB);
}

TEST_F(SameHostReadsTest, AMappedBlockNeverChangesUnderItsReaderWhenOverwrittenOrRemoved) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  // Unmapped as soon as let go: the memory counted below follows the readers alone (a kept
  // idle mapping of a removed block would stay counted for up to its idle lifetime).
  Client client(UnmappingAtOnce());
  const std::vector<std::byte> first = RandomByteVector(16 * kMiB, 1);
  const std::vector<std::byte> second = RandomByteVector(16 * kMiB, 2);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", first));
  std::optional<BlockData> old_version = client.GetMapped(BlockId::Rdd(1, 0));
  ASSERT_TRUE(old_version.has_value());

  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", second));
  Result<BlockData> new_version = client.GetChunks(BlockId::Rdd(1, 0));
  ASSERT_TRUE(new_version.ok()) << new_version.status().ToString();
  EXPECT_TRUE(Bytes(*new_version) == second) << "a new reader sees the new version";
  EXPECT_TRUE(Bytes(*old_version) == first) << "the old reader's bytes changed under it";

  ASSERT_TRUE(client.Remove({BlockId::Rdd(1, 0)}).ok());
  EXPECT_EQ(client.GetChunks(BlockId::Rdd(1, 0)).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Bytes(*old_version) == first);
  EXPECT_TRUE(Bytes(*new_version) == second);
  // Both versions are gone from the index, their pages still mapped and still counted.
  EXPECT_EQ(Metric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}"), 32.0 * kMiB);
  old_version.reset();
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}", 16.0 * kMiB));
  new_version = InternalError("dropped");  // drops the second mapping
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 0));
}

TEST_F(SameHostReadsTest, AReadAgainReusesTheMappingUntilTheBlockChangesOrItsIdleLifetimeEnds) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  ClientOptions options = cluster_.ClientOptionsFor();
  options.idle_mapping_lifetime = milliseconds(1500);
  Client client(options);
  const std::vector<std::byte> first = RandomByteVector(8 * kMiB, 1);
  const std::vector<std::byte> second = RandomByteVector(8 * kMiB, 2);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", first));
  const std::byte* mapped_at = nullptr;
  {
    Result<BlockData> read = client.GetChunks(BlockId::Rdd(1, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    mapped_at = read->chunks.at(0)->bytes().data();
  }
  // Let go of, but kept mapped and pinned (counted by the worker) for the next read.
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 1);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pinned_bytes"), 8.0 * kMiB);
  for (int i = 0; i < 3; ++i) {
    Result<BlockData> again = client.GetChunks(BlockId::Rdd(1, 0));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->chunks.at(0)->bytes().data(), mapped_at) << "mapped anew";
    EXPECT_TRUE(Bytes(*again) == first);
  }
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 1);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_block_reads_total{origin=\"local\"}"), 4);

  // Overwritten: the next read maps the new version and the old mapping goes.
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", second));
  {
    Result<BlockData> fresh = client.GetChunks(BlockId::Rdd(1, 0));
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    EXPECT_TRUE(Bytes(*fresh) == second);
  }
  // Only the new version stays mapped (and pinned) for the next read.
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 8.0 * kMiB));
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 1);
  // Idle past its lifetime: unmapped, and the worker stops counting it.
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 0));
}

TEST_F(SameHostReadsTest, ARemovalByTheReaderUnmapsItsKeptMappingsAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  ClientOptions options = cluster_.ClientOptionsFor();
  options.idle_mapping_lifetime = milliseconds(60'000);  // never the reason here
  Client client(options);
  for (int p = 0; p < 2; ++p) {
    const std::string name = "rdd_1_" + std::to_string(p);
    ASSERT_NO_FATAL_FAILURE(Put(client, name, RandomByteVector(4 * kMiB, p)));
    ASSERT_TRUE(client.GetChunks(BlockId::Parse(name).value()).ok());
  }
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_2_0", RandomByteVector(4 * kMiB, 9)));
  ASSERT_TRUE(client.GetChunks(BlockId::Rdd(2, 0)).ok());
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 3) << "kept mapped for the next read";

  ASSERT_TRUE(client.Remove({BlockId::Rdd(1, 0)}).ok());
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 2));
  ASSERT_TRUE(client.RemoveRdd(1).ok());
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 1));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 4.0 * kMiB));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}", 4.0 * kMiB));
}

TEST_F(SameHostReadsTest, AnOverwriteByTheReaderUnmapsItsKeptMappingOfTheOldVersionAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  ClientOptions options = cluster_.ClientOptionsFor();
  options.idle_mapping_lifetime = milliseconds(60'000);  // never the reason here
  Client client(options);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", RandomByteVector(4 * kMiB, 1)));
  ASSERT_TRUE(client.GetChunks(BlockId::Rdd(1, 0)).ok());
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 1) << "kept mapped for the next read";

  const std::vector<std::byte> second = RandomByteVector(4 * kMiB, 2);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", second));
  // The old version's pin goes with the mapping, and its memory with the pin.
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}", 4.0 * kMiB));
  Result<BlockData> got = client.GetChunks(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(Bytes(*got) == second);
}

TEST_F(SameHostReadsTest, APinnedBlockIsNotEvictedUntilItsReaderLetsGo) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(UnmappingAtOnce());
  const std::vector<std::byte> pinned_bytes = RandomByteVector(16 * kMiB, 9);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_2_0", pinned_bytes));
  std::optional<BlockData> mapped = client.GetMapped(BlockId::Rdd(2, 0));
  ASSERT_TRUE(mapped.has_value());
  // Eight more blocks of other RDDs through a 64 MiB budget: all but the pinned one rotate.
  for (int i = 0; i < 8; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        Put(client, "rdd_" + std::to_string(10 + i) + "_0", RandomByteVector(16 * kMiB, i)));
  }
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_2_0")) << "a pinned block was evicted";
  EXPECT_TRUE(Bytes(*mapped) == pinned_bytes);
  mapped.reset();
  ASSERT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 0));
  for (int i = 8; i < 12; ++i) {
    ASSERT_NO_FATAL_FAILURE(
        Put(client, "rdd_" + std::to_string(10 + i) + "_0", RandomByteVector(16 * kMiB, i)));
  }
  EXPECT_FALSE(cluster_.WorkerHolds("w1", "rdd_2_0")) << "released, it is evicted as any other";
}

TEST_F(SameHostReadsTest, AReaderKilledWithItsMappingHeldReleasesItsPins) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", RandomByteVector(8 * kMiB, 3)));
  const std::string marker = cluster_.dir().Sub("mapped");
  Process probe = Process::Start(
      BinaryPath("bm-map-probe"),
      {"--master", cluster_.master_endpoint(), "--block", "rdd_1_0", "--mapped-marker", marker},
      cluster_.dir().Sub("probe.log"));
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(marker); }, milliseconds(10000)))
      << ReadFile(cluster_.dir().Sub("probe.log"));
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pins"), 1);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pinned_bytes"), 8.0 * kMiB);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_local_readers"), 1);
  // The master hears it with the next heartbeat: bmctl workers shows it.
  EXPECT_TRUE(WaitFor(
      [&] {
        nlohmann::json workers = cluster_.BmctlJson({"workers"});
        return workers.size() == 1 && workers[0].value("memory_pinned", 0) == 8 * kMiB;
      },
      milliseconds(10000)));
  probe.Kill();  // SIGKILL: no release is ever sent
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pinned_bytes", 0));
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_local_readers", 0));
}

TEST_F(SameHostReadsTest, PinsExpireAfterThePinLifetimeAndTheMappingStaysIntact) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB", {"--pin-lifetime", "1"}));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(2 * kMiB, 4);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  std::optional<BlockData> mapped = client.GetMapped(BlockId::Rdd(1, 0));
  ASSERT_TRUE(mapped.has_value());
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_pins_expired_total", 1));
  EXPECT_EQ(Metric(http_, "blockmgr_worker_pinned_bytes"), 0);
  ASSERT_TRUE(client.Remove({BlockId::Rdd(1, 0)}).ok());
  EXPECT_TRUE(AwaitMetric(http_, "blockmgr_worker_used_bytes{tier=\"memory\"}", 0));
  EXPECT_TRUE(Bytes(*mapped) == bytes) << "the sealed pages are the reader's now";
}

TEST_F(SameHostReadsTest, AMappingCannotBeMadeWritable) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(1 * kMiB, 5);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  std::optional<BlockData> mapped = client.GetMapped(BlockId::Rdd(1, 0));
  ASSERT_TRUE(mapped.has_value());
  auto* start = const_cast<std::byte*>(mapped->chunks.front()->bytes().data());
  const size_t length = mapped->size;
  EXPECT_NE(mprotect(start, length, PROT_READ | PROT_WRITE), 0) << "the mapping became writable";

  // Reopening the memfd behind the mapping, read-write, through /proc.
  char range[64];
  std::snprintf(range, sizeof range, "%lx-%lx", reinterpret_cast<unsigned long>(start),
                reinterpret_cast<unsigned long>(start) + length);
  const int reopened = open((std::string("/proc/self/map_files/") + range).c_str(), O_RDWR);
  if (reopened >= 0) {
    EXPECT_LT(write(reopened, "x", 1), 0) << "wrote into a sealed region";
    void* writable = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0);
    EXPECT_EQ(writable, MAP_FAILED) << "mapped a sealed region writable";
    if (writable != MAP_FAILED) munmap(writable, length);
    EXPECT_NE(ftruncate(reopened, 0), 0) << "shrank a sealed region";
    close(reopened);
  }
  EXPECT_TRUE(Bytes(*mapped) == bytes);
}

TEST_F(SameHostReadsTest, AReaderOfAnotherUidIsRefusedOnTheSocketAndReadsOverTcp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a reader as another uid";
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", RandomByteVector(1 * kMiB, 6)));
  // Let uid 65534 reach the socket file, so the worker's own check (SO_PEERCRED) is what
  // refuses it, not the file's mode.
  const std::filesystem::path disk = cluster_.worker_disk_dir("w1");
  for (std::filesystem::path dir = disk; dir != dir.root_path(); dir = dir.parent_path()) {
    if (dir.string().size() <= 4) break;  // not /tmp itself
    chmod(dir.c_str(), 0755);
  }
  chmod((disk / "local.sock").c_str(), 0777);
  CommandResult probe =
      RunCommand(BinaryPath("bm-map-probe"),
                 {"--master", cluster_.master_endpoint(), "--block", "rdd_1_0", "--uid", "65534"});
  EXPECT_EQ(probe.exit_code, 3) << probe.out << probe.err;  // not mapped; read over TCP
  EXPECT_NE(probe.out.find("not mapped"), std::string::npos) << probe.out;
  EXPECT_GE(Metric(http_, "blockmgr_worker_local_reads_refused_total"), 1);
  EXPECT_NE(ReadFile(cluster_.dir().Sub("w1.log")).find("uid 65534 may not read"),
            std::string::npos);
}

TEST_F(SameHostReadsTest, WithLocalReadsOffEveryReadGoesOverTcpAndCountsAsLocalOrigin) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB", {"--no-local-reads"}));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(2 * kMiB, 7);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  EXPECT_FALSE(client.GetMapped(BlockId::Rdd(1, 0)).has_value());
  Result<BlockData> read = client.GetChunks(BlockId::Rdd(1, 0));
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(Bytes(*read) == bytes);
  EXPECT_FALSE(std::filesystem::exists(cluster_.worker_disk_dir("w1") + "/local.sock"));
  EXPECT_EQ(Metric(http_, "blockmgr_worker_local_read_bytes_total"), 0);
  // Over loopback TCP, still a reader on this host.
  EXPECT_EQ(Metric(http_, "blockmgr_worker_block_reads_total{origin=\"local\"}"), 1);
}

// Sends `message` on a raw local-read connection, with `extra` bytes after it.
void SendRaw(int socket, capnp::MessageBuilder& message, std::span<const std::byte> extra = {}) {
  std::vector<uint32_t> table;
  std::vector<std::span<const std::byte>> parts;
  MessageParts(message, table, parts);
  if (!extra.empty()) parts.push_back(extra);
  ASSERT_TRUE(SendPacket(socket, parts, -1, true).ok());
}

TEST_F(SameHostReadsTest, SmallBlocksComeAfterTheReplyOrInsideItAsTheReaderAsks) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(3000, 4);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  zmq::context_t context;
  Result<std::pair<std::string, std::string>> offer =
      AskForTicket(context, cluster_.worker_endpoint("w1"), ChannelSecurity{});
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  Result<OwnedFd> raw = ConnectLocal(offer->first);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  capnp::MallocMessageBuilder hello;
  hello.initRoot<proto::LocalRequest>().setHello(capnp::Data::Reader(
      reinterpret_cast<const kj::byte*>(offer->second.data()), offer->second.size()));
  ASSERT_NO_FATAL_FAILURE(SendRaw(raw->get(), hello));
  ASSERT_TRUE(ReceivePacket(raw->get(), milliseconds(5000)).ok());

  for (const bool trailer : {false, true}) {
    SCOPED_TRACE(trailer ? "trailer" : "inside the message");
    capnp::MallocMessageBuilder get;
    proto::LocalRequest::Builder request = get.initRoot<proto::LocalRequest>();
    request.setId(7);
    request.setGet("rdd_1_0");
    request.setTrailer(trailer);
    ASSERT_NO_FATAL_FAILURE(SendRaw(raw->get(), get));
    Result<LocalPacket> answer = ReceivePacket(raw->get(), milliseconds(5000));
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    capnp::FlatArrayMessageReader message(answer->words);
    proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
    ASSERT_TRUE(reply.isBlock());
    proto::LocalBlock::Reader block = reply.getBlock();
    EXPECT_EQ(block.getSize(), bytes.size());
    EXPECT_EQ(block.getInTrailer(), trailer);
    if (trailer) {
      EXPECT_EQ(block.getInline().size(), 0u);
      ASSERT_NE(answer->trailer, nullptr);
      ASSERT_EQ(answer->trailer->size(), bytes.size());
      EXPECT_EQ(block.getTrailerOffset(), 0u);
      EXPECT_EQ(std::memcmp(answer->trailer->bytes().data(), bytes.data(), bytes.size()), 0);
    } else {
      EXPECT_EQ(answer->trailer, nullptr);
      ASSERT_EQ(block.getInline().size(), bytes.size());
      EXPECT_EQ(std::memcmp(block.getInline().begin(), bytes.data(), bytes.size()), 0);
    }
  }
  // A request with bytes after it: the worker hangs up.
  capnp::MallocMessageBuilder get;
  get.initRoot<proto::LocalRequest>().setGet("rdd_1_0");
  const std::byte junk[5] = {};
  ASSERT_NO_FATAL_FAILURE(SendRaw(raw->get(), get, junk));
  EXPECT_EQ(ReceivePacket(raw->get(), milliseconds(5000)).status().code(), StatusCode::kUnavailable)
      << "the connection stayed open";
  // The worker serves on.
  Result<std::vector<std::byte>> again = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == bytes);
}

// The small-block arena (common/net/block_arena.h): a small memory block a reader got once is
// copied out of the worker's arena from then on, with no request to the worker, until the block
// changes.
double LocalReads(int http_port) {
  return Metric(http_port, "blockmgr_worker_block_reads_total{origin=\"local\"}");
}

TEST_F(SameHostReadsTest, ASmallBlockGotOnceIsCopiedOutOfTheArenaUntilItChanges) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  Client writer(cluster_.ClientOptionsFor());
  const std::vector<std::byte> first = RandomByteVector(4096, 1);
  ASSERT_NO_FATAL_FAILURE(Put(writer, "rdd_1_0", first));
  for (int i = 0; i < 5; ++i) {
    Result<std::vector<std::byte>> read = client.Get(BlockId::Rdd(1, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == first);
  }
  // The first get asked the worker; the other four found the block in the arena.
  EXPECT_EQ(LocalReads(http_), 1);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_local_arena_blocks"), 1);
  EXPECT_NE(ReadFile("/proc/self/maps").find("/memfd:blockmgr-arena"), std::string::npos);

  // Overwritten by another client: the next get asks the worker and has the new bytes.
  const std::vector<std::byte> second = RandomByteVector(5000, 2);
  ASSERT_NO_FATAL_FAILURE(Put(writer, "rdd_1_0", second));
  for (int i = 0; i < 3; ++i) {
    Result<std::vector<std::byte>> read = client.Get(BlockId::Rdd(1, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == second);
  }
  EXPECT_EQ(LocalReads(http_), 2);

  // Removed by another client: gone for this reader too.
  ASSERT_TRUE(writer.Remove({BlockId::Rdd(1, 0)}).ok());
  EXPECT_EQ(client.Get(BlockId::Rdd(1, 0)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Metric(http_, "blockmgr_worker_local_arena_blocks"), 0);

  // Many at once (GetManyChunks): those in the arena are copied, the rest asked for in one
  // request, each right.
  std::vector<BlockId> ids;
  std::vector<std::vector<std::byte>> stored;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(BlockId::Rdd(2, i));
    stored.push_back(RandomByteVector(100 + 1000 * i, 10 + i));
    ASSERT_NO_FATAL_FAILURE(Put(writer, ids.back().ToString(), stored.back()));
  }
  std::vector<Result<BlockData>> got = client.GetManyChunks(ids);  // locations learned (TCP)
  ASSERT_TRUE(client.Get(ids[3]).ok());
  ASSERT_TRUE(client.Get(ids[3]).ok());
  const double before = LocalReads(http_);
  got = client.GetManyChunks(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    EXPECT_TRUE(Bytes(*got[i]) == stored[i]) << ids[i].ToString();
  }
  EXPECT_EQ(LocalReads(http_), before + 7);  // rdd_2_3 came from the arena
  got = client.GetManyChunks(ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    EXPECT_TRUE(Bytes(*got[i]) == stored[i]) << ids[i].ToString();
  }
  EXPECT_EQ(LocalReads(http_), before + 7);  // all from the arena

  // A client that takes no arena asks every time.
  ClientOptions no_arena = cluster_.ClientOptionsFor();
  no_arena.local_arena = false;
  Client asking(no_arena);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(asking.Get(ids[0]).ok());
  EXPECT_EQ(LocalReads(http_), before + 9);
}

TEST_F(SameHostReadsTest, AnEvictedSmallBlockLeavesTheArena) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("4MiB"));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> small = RandomByteVector(8000, 3);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", small, StorageLevel::kMemoryAndDisk));
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  EXPECT_EQ(LocalReads(http_), 1);
  // Memory filled past the budget: the block is spilled to disk, and read from there.
  for (int i = 0; i < 6; ++i) {  // of RDDs of their own: a put evicts no block of its RDD
    ASSERT_NO_FATAL_FAILURE(
        Put(client, "rdd_" + std::to_string(20 + i) + "_0", RandomByteVector(kMiB, i)));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<std::vector<BlockLocations>> where = client.Locations({BlockId::Rdd(1, 0)});
        return where.ok() && where->size() == 1 && (*where)[0].locations.size() == 1 &&
               (*where)[0].locations[0].tier == Tier::kDisk;
      },
      seconds(10)));
  Result<std::vector<std::byte>> read = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(*read == small);
  EXPECT_EQ(LocalReads(http_), 2);
}

// Gets served from the arena never reach the worker, but the reader reports them: they count
// for the block's recency, so a block read often from the arena is not evicted before one
// nobody read since.
TEST_F(SameHostReadsTest, ArenaReadsCountForTheBlocksRecency) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("4MiB", {"--eviction", "lru"}));
  Client client(cluster_.ClientOptionsFor());
  constexpr uint64_t kSmall = 64 << 10;
  const std::vector<std::byte> read_often = RandomByteVector(kSmall, 1);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", read_often));
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());  // through the socket: into the arena
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_2_0", RandomByteVector(kSmall, 2)));
  // 256 reads from the arena: one report, after which rdd_1_0 is the most recently used.
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  EXPECT_EQ(LocalReads(http_), 1);
  ASSERT_TRUE(AwaitMetric(http_, "blockmgr_worker_local_arena_reads_total", 256));
  // The budget filled to the byte, then one more small block: one block must go, the least
  // recently used, which is rdd_2_0 (put after rdd_1_0's socket read, before its arena reads).
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_3_0", RandomByteVector(4 * kMiB - 2 * kSmall, 3)));
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_4_0", RandomByteVector(kSmall, 4)));
  EXPECT_TRUE(cluster_.WorkerHolds("w1", "rdd_1_0"));
  EXPECT_FALSE(cluster_.WorkerHolds("w1", "rdd_2_0"));
}

// A stopped worker stops keeping its arena alive: within 3 s its readers ask the socket again,
// and find the worker halted, rather than reading on from an arena nobody keeps current.
TEST_F(SameHostReadsTest, AStoppedWorkersArenaIsNoLongerRead) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(4096, 9);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  ASSERT_EQ(LocalReads(http_), 1);  // the second from the arena
  cluster_.SignalWorker("w1", SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitFor([&] { return !client.Get(BlockId::Rdd(1, 0)).ok(); }, seconds(30)));
  // Read from the arena for its last 3 s at most (and as long again for the socket and TCP to
  // give up on the halted worker).
  EXPECT_GE(std::chrono::steady_clock::now() - stopped, seconds(2));
  cluster_.SignalWorker("w1", SIGCONT);
  Result<std::vector<std::byte>> again = UnavailableError("not read yet");
  EXPECT_TRUE(WaitFor(
      [&] {
        again = client.Get(BlockId::Rdd(1, 0));
        return again.ok();
      },
      seconds(30)));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == bytes);
}

TEST_F(SameHostReadsTest, WithTheArenaOffEveryGetAsksTheWorker) {
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB", {"--local-arena-mb", "0"}));
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> bytes = RandomByteVector(4096, 4);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());
  EXPECT_EQ(LocalReads(http_), 3);
  EXPECT_EQ(ReadFile("/proc/self/maps").find("/memfd:blockmgr-arena"), std::string::npos);
}

class SameHostReadsWithKeysTest : public SameHostReadsTest {};

TEST_F(SameHostReadsWithKeysTest, OnlyAKeyThatMayReadGetsATicketAndOnlyATicketOpensTheSocket) {
  ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client client(cluster_.ClientOptionsFor("client"));
  const std::vector<std::byte> bytes = RandomByteVector(1 * kMiB, 8);
  ASSERT_NO_FATAL_FAILURE(Put(client, "rdd_1_0", bytes));
  std::optional<BlockData> mapped = client.GetMapped(BlockId::Rdd(1, 0));
  ASSERT_TRUE(mapped.has_value()) << "a client key maps blocks in a keyed cluster";
  EXPECT_TRUE(Bytes(*mapped) == bytes);

  zmq::context_t context;
  const std::string endpoint = cluster_.worker_endpoint("w1");
  // A key of a role that may not read blocks gets no ticket.
  Result<std::pair<std::string, std::string>> as_master =
      AskForTicket(context, endpoint, cluster_.SecurityOf("master", "w1"));
  EXPECT_EQ(as_master.status().code(), StatusCode::kPermissionDenied)
      << as_master.status().ToString() << cluster_.LogTail("w1");

  Result<std::pair<std::string, std::string>> offer =
      AskForTicket(context, endpoint, cluster_.SecurityOf("client", "w1"));
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  const std::string& path = offer->first;
  // No ticket, or a made-up one: refused.
  EXPECT_EQ(
      LocalReadConnection::Open(path, std::string(16, 'x'), milliseconds(3000)).status().code(),
      StatusCode::kPermissionDenied);
  // The real one opens the socket once; a second use is refused.
  Result<std::shared_ptr<LocalReadConnection>> opened =
      LocalReadConnection::Open(path, offer->second, milliseconds(3000));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Result<LocalBlockRead> read = (*opened)->Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(Bytes(read->data) == bytes);
  EXPECT_EQ(LocalReadConnection::Open(path, offer->second, milliseconds(3000)).status().code(),
            StatusCode::kPermissionDenied);
  read->data = {};
  (*opened)->mapped()->Close();  // its idle mapping keeps it open otherwise

  // A get before any ticket: the worker hangs up.
  Result<OwnedFd> raw = ConnectLocal(path);
  ASSERT_TRUE(raw.ok());
  capnp::MallocMessageBuilder get;
  proto::LocalRequest::Builder request = get.initRoot<proto::LocalRequest>();
  request.setId(1);
  request.setGet("rdd_1_0");
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(get);
  ASSERT_TRUE(SendPacket(raw->get(),
                         std::as_bytes(std::span(words.asBytes().begin(), words.asBytes().size())),
                         -1, true)
                  .ok());
  // A get before any ticket: refused, and the worker hangs up.
  Result<LocalPacket> answer = ReceivePacket(raw->get(), milliseconds(5000));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  capnp::FlatArrayMessageReader reply(answer->words);
  ASSERT_TRUE(reply.getRoot<proto::LocalReply>().isError());
  EXPECT_EQ(StatusFromError(reply.getRoot<proto::LocalReply>().getError()).code(),
            StatusCode::kPermissionDenied);
  EXPECT_FALSE(answer->fd.valid());
  EXPECT_EQ(ReceivePacket(raw->get(), milliseconds(5000)).status().code(), StatusCode::kUnavailable)
      << "the connection stayed open";
  EXPECT_GE(Metric(http_, "blockmgr_worker_local_reads_refused_total"), 3);
}

// A tenant's readers share an arena that holds only the tenant's own datasets' blocks: a
// dataset shared with it is read through the socket every time, so an unshare leaves nothing
// of it behind in the tenant's readers' mappings.
TEST_F(SameHostReadsWithKeysTest, ATenantsArenaHoldsOnlyItsOwnDatasetsBlocks) {
  ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1"}));
  for (auto [name, tenant] : {std::pair{"alice", "alice"}, {"bob", "bob"}}) {
    ASSERT_TRUE(GenerateCertificate(cluster_.keys_dir(), name, KeyRole::kClient).ok());
    std::ofstream(cluster_.keys_dir() + "/" + name + ".tenant") << tenant << "\n";
  }
  ASSERT_NO_FATAL_FAILURE(StartWorker("64MiB"));
  Client alice(cluster_.ClientOptionsFor("alice"));
  Client bob(cluster_.ClientOptionsFor("bob"));
  const std::vector<std::byte> alices = RandomByteVector(4096, 5);
  const std::vector<std::byte> bobs = RandomByteVector(4096, 6);
  ASSERT_NO_FATAL_FAILURE(Put(alice, "rdd_7_0", alices));
  ASSERT_NO_FATAL_FAILURE(Put(bob, "rdd_8_0", bobs));
  const CommandResult shared = cluster_.BmctlAs("alice", {"share", "7", "bob"});
  ASSERT_EQ(shared.exit_code, 0) << shared.err;

  for (int i = 0; i < 3; ++i) {
    Result<std::vector<std::byte>> read = alice.Get(BlockId::Rdd(7, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == alices);
  }
  EXPECT_EQ(LocalReads(http_), 1);  // then from alice's arena
  for (int i = 0; i < 3; ++i) {
    Result<std::vector<std::byte>> read = bob.Get(BlockId::Rdd(7, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == alices);
  }
  EXPECT_EQ(LocalReads(http_), 4);  // alice's block is not in bob's arena
  for (int i = 0; i < 3; ++i) {
    Result<std::vector<std::byte>> read = bob.Get(BlockId::Rdd(8, 0));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(*read == bobs);
  }
  EXPECT_EQ(LocalReads(http_), 5);  // bob's own, from bob's arena
}

}  // namespace
}  // namespace bm
