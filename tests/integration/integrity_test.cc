// Corrupt stored bytes are never served and cost only the blocks they hit: a worker restarted
// on a damaged table file starts, its scrubber finds the bad blocks, and the master restores
// their copies from the good ones. A running worker's copy corrupted through its test-only
// fault injection (corruptBlock) is read past, dropped and restored the same way.

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"
#include "tests/support/tcp_proxy.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kChunk = 1 << 20;

// A worker with its scrubber off, so that only readers can find a copy's damage.
WorkerSpec Unscrubbed(const std::string& id) {
  return WorkerSpec{.id = id, .disk_limit = "", .extra_args = {"--scrub-rate", "0"}};
}

// Flushes a stopped worker's write-ahead log into a table file and returns the largest one.
std::string FlushedTableFile(const std::string& disk_dir) {
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Status opened = rocksdb::DB::Open(rocksdb::Options(), disk_dir, &raw);
    EXPECT_TRUE(opened.ok()) << opened.ToString();
    if (!opened.ok()) return "";
    std::unique_ptr<rocksdb::DB> db(raw);
    EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
  }
  std::string largest;
  uint64_t largest_size = 0;
  for (const auto& entry : std::filesystem::directory_iterator(disk_dir)) {
    if (entry.path().extension() == ".sst" && entry.file_size() > largest_size) {
      largest = entry.path().string();
      largest_size = entry.file_size();
    }
  }
  return largest;
}

// Flips one byte of chunk 0 of `block` in a stopped worker's database, through RocksDB (so its
// own checksums still pass: only the block's digests can tell), or in its chunk file when its
// meta (format 5) says the bytes are there.
void CorruptFirstChunk(const std::string& disk_dir, const std::string& block) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(rocksdb::Options(), disk_dir, &raw);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::string meta_key;
  // Version metadata records ("v" + 8-byte generation) end with the block id.
  for (it->Seek("v"); it->Valid() && it->key().starts_with("v"); it->Next()) {
    if (it->key().size() == 9 && it->value().ToString().ends_with(block)) {
      meta_key = it->key().ToString();
    }
  }
  ASSERT_FALSE(meta_key.empty()) << block;
  std::string meta;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), meta_key, &meta).ok());
  if (meta[0] == 5) {
    char name[17];
    uint64_t generation = 0;
    for (size_t i = 1; i < 9; ++i) generation = (generation << 8) | uint8_t(meta_key[i]);
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(generation));
    const std::string path = disk_dir + "/chunks/" + name;
    std::string bytes = ReadFile(path);
    ASSERT_FALSE(bytes.empty()) << path;
    const size_t at = std::min<size_t>(bytes.size(), 1 << 20) / 2;
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(at));
    file.put(static_cast<char>(bytes[at] ^ 0x20));
    ASSERT_TRUE(file.good());
    return;
  }
  const std::string chunk_key = meta_key + std::string(8, '\0');
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), chunk_key, &value).ok());
  value[value.size() / 2] ^= 0x20;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), chunk_key, value).ok());
}

// The worker's checksum failures counted `where` (transit, disk, memory, client-read), from its
// /metrics; nullopt when it does not answer or shows no such sample.
std::optional<uint64_t> ChecksumFailures(LocalCluster& cluster, const std::string& worker,
                                         const std::string& where) {
  httplib::Client http("127.0.0.1", cluster.HttpPort(worker));
  httplib::Result metrics = http.Get("/metrics");
  if (!metrics || metrics->status != 200) return std::nullopt;
  const std::string sample = "blockmgr_worker_checksum_failures_total{where=\"" + where + "\"} ";
  const size_t at = metrics->body.find(sample);
  if (at == std::string::npos) return std::nullopt;
  return std::stoull(metrics->body.substr(at + sample.size()));
}

// Whether a line of the log at `path` holds every one of `parts`.
bool LogHasLineWith(const std::string& path, const std::vector<std::string>& parts) {
  std::istringstream log(ReadFile(path));
  for (std::string line; std::getline(log, line);) {
    if (std::all_of(parts.begin(), parts.end(), [&](const std::string& part) {
          return line.find(part) != std::string::npos;
        })) {
      return true;
    }
  }
  return false;
}

// Workers whose copies only readers can find bad (scrubbers off), with fault injection on and
// metrics served.
const std::vector<std::string> kFaultInjectingWorker = {
    "--scrub-rate", "0", "--enable-fault-injection", "--http", "127.0.0.1:0"};

// A byte flipped in the first listed copy of a two-copy block, on `tier`: the next get reads
// the other copy and returns the right bytes, the bad copy is dropped (counted as a checksum
// failure `where`), and the block is back at 2 of 2 copies, both intact, within seconds.
void ExpectACorruptCopyIsReadPastDroppedAndRestored(const std::string& level, proto::Tier tier,
                                                    const std::string& where) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "", kFaultInjectingWorker}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", "", kFaultInjectingWorker}));
  const std::string id = "rdd_4_0";
  const std::string bytes = RandomBytes(3 * kChunk + 123, 90);
  CommandResult put = cluster.Bmctl({"put", id, "-", "--level", level}, bytes);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  ASSERT_TRUE(WaitFor([&] { return cluster.Locations({id})[id].size() == 2; }, 10s));

  // The copy a reader tries first (the master's order): the get must read past it.
  const std::string bad = std::get<0>(cluster.Locations({id})[id].front());
  const std::string good = bad == "w1" ? "w2" : "w1";
  ASSERT_EQ(ChecksumFailures(cluster, bad, where), 0u);
  Status corrupted = cluster.CorruptCopy(bad, id, tier, kChunk + 5);
  ASSERT_TRUE(corrupted.ok()) << corrupted.ToString() << cluster.LogTail(bad);

  CommandResult got = cluster.Bmctl({"get", id});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes) << "the get returned other bytes than were put";
  EXPECT_TRUE(LogHasLineWith(cluster.dir().Sub(bad + ".log"),
                             {"block " + id, "corrupt", "dropped, never served"}))
      << cluster.LogTail(bad);
  EXPECT_EQ(ChecksumFailures(cluster, bad, where), 1u);
  EXPECT_EQ(ChecksumFailures(cluster, good, where), 0u);

  // Back at its level's copies (the bad worker holds a fresh one made from the good copy), and
  // every copy is intact.
  std::map<std::string, BlockCopies> blocks;
  EXPECT_TRUE(WaitFor(
      [&] {
        blocks = cluster.ListBlockCopies();
        return blocks[id].wanted == 2 && blocks[id].workers.size() == 2;
      },
      10s))
      << cluster.Bmctl({"blocks"}).out << cluster.LogTail("master");
  CommandResult verify = cluster.Bmctl({"verify", id});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(verify.out.find("corrupt"), std::string::npos) << verify.out;
  got = cluster.Bmctl({"get", id});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes);
}

TEST(IntegrityTest, AByteFlippedInAMemoryCopyIsReadPastDroppedAndTheCopyRestored) {
  ExpectACorruptCopyIsReadPastDroppedAndRestored("MEMORY_ONLY_2", proto::Tier::MEMORY, "memory");
}

TEST(IntegrityTest, AByteFlippedInADiskCopyIsReadPastDroppedAndTheCopyRestored) {
  ExpectACorruptCopyIsReadPastDroppedAndRestored("DISK_ONLY_2", proto::Tier::DISK, "disk");
}

// The only copy corrupted: the get fails with "corrupt on every copy" and creates no file.
TEST(IntegrityTest, AGetOfABlockWhoseOnlyCopyWasCorruptedInMemoryFailsAndWritesNothing) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "", kFaultInjectingWorker}));
  const std::string bytes = RandomBytes(2 * kChunk, 91);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_5_0", "-", "--level", "MEMORY_ONLY"}, bytes).exit_code, 0);
  Status corrupted = cluster.CorruptCopy("w1", "rdd_5_0", proto::Tier::MEMORY, 2 * kChunk - 1);
  ASSERT_TRUE(corrupted.ok()) << corrupted.ToString();

  const std::string output = cluster.dir().Sub("rdd_5_0.out");
  CommandResult bad = cluster.Bmctl({"get", "rdd_5_0", "-o", output});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("corrupt on every copy"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(output)) << "no byte of a corrupt block is written";
  EXPECT_EQ(ChecksumFailures(cluster, "w1", "memory"), 1u);
  EXPECT_TRUE(WaitFor([&] { return cluster.Locations({"rdd_5_0"})["rdd_5_0"].empty(); }, 10s))
      << "the bad copy was dropped";
}

// Off by default: a worker started without --enable-fault-injection refuses corruptBlock,
// saying why, and its copy stays as it was.
TEST(IntegrityTest, AWorkerWithoutFaultInjectionRefusesToCorruptABlock) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1"}));
  const std::string bytes = RandomBytes(1000, 92);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_5_1", "-"}, bytes).exit_code, 0);
  Status refused = cluster.CorruptCopy("w1", "rdd_5_1", proto::Tier::MEMORY, 0);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("--enable-fault-injection"), std::string::npos)
      << refused.ToString();
  CommandResult got = cluster.Bmctl({"get", "rdd_5_1"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes);
}

TEST(IntegrityTest, ACorruptTableFileOfAStoppedWorkerCostsOnlyItsBlocksWhichAreRepaired) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  // Every block's bytes in RocksDB's table files (not chunk files), where the damage goes.
  const std::vector<std::string> in_tables = {"--disk-chunk-file-min", "off"};
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", "", in_tables}));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w2", "64MiB", "", in_tables}));
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 12; ++i) {
    const std::string id = "rdd_1_" + std::to_string(i);
    stored[id] = RandomBytes(kChunk + 1000 + i, i);
    CommandResult put =
        cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2", "--worker", "w1"}, stored[id]);
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }
  std::vector<std::string> ids;
  for (const auto& [id, bytes] : stored) ids.push_back(id);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto locations = cluster.Locations(ids);
        for (const std::string& id : ids) {
          if (locations[id].size() != 2) return false;
        }
        return true;
      },
      10s));

  cluster.KillWorker("w1");
  const std::string table = FlushedTableFile(cluster.worker_disk_dir("w1"));
  ASSERT_FALSE(table.empty());
  const uint64_t table_size = std::filesystem::file_size(table);
  ASSERT_GT(table_size, 12 * kChunk);
  {
    std::fstream file(table, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(table_size / 2));
    const std::string garbage(64 << 10, 'z');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    ASSERT_TRUE(file.good());
  }

  const std::string log_path = cluster.dir().Sub("w1.log");
  const size_t log_before = ReadFile(log_path).size();
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {"w1",
       "64MiB",
       "",
       {"--scrub-rate", "100", "--http", "127.0.0.1:0", "--disk-chunk-file-min", "off"}}));
  std::string log;
  ASSERT_TRUE(WaitFor(
      [&] {
        log = ReadFile(log_path).substr(log_before);
        return log.find("scrubber: pass 1 ") != std::string::npos;
      },
      15s))
      << cluster.LogTail("w1");
  EXPECT_NE(log.find("is corrupt on disk"), std::string::npos) << log;

  // Counted where metrics show them.
  // (The scrubber runs on the storage thread: its figures reach the loop right after its log.)
  httplib::Client http("127.0.0.1", cluster.HttpPort("w1"));
  const std::string disk_failures = "blockmgr_worker_checksum_failures_total{where=\"disk\"} ";
  std::string body;
  EXPECT_TRUE(WaitFor(
      [&] {
        httplib::Result metrics = http.Get("/metrics");
        if (!metrics || metrics->status != 200) return false;
        body = metrics->body;
        const size_t at = body.find(disk_failures);
        return at != std::string::npos &&
               std::stoull(body.substr(at + disk_failures.size())) >= 1 &&
               body.find("blockmgr_worker_scrubbed_bytes_total 0\n") == std::string::npos;
      },
      10s))
      << body;

  // Every block is back at two copies, w1's among them.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto locations = cluster.Locations(ids);
        for (const std::string& id : ids) {
          if (locations[id].size() != 2) return false;
        }
        for (const std::string& id : ids) {
          if (!cluster.WorkerHolds("w1", id)) return false;
        }
        return true;
      },
      30s))
      << cluster.LogTail("master") << cluster.LogTail("w1");

  // Served right from either copy: first with both workers, then from w1's alone.
  for (int round = 0; round < 2; ++round) {
    if (round == 1) cluster.KillWorker("w2");
    for (const auto& [id, bytes] : stored) {
      CommandResult got = cluster.Bmctl({"get", id});
      ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
      EXPECT_TRUE(got.out == bytes)
          << id << " came back with different bytes (round " << round << ")";
    }
  }
}

// 24 DISK_ONLY blocks on one worker, their bytes in chunk files and their records in one small
// table file; 3 bits flipped in that file. Every block read "lost at start-up (generation N was
// committed but the store no longer has it ..." though every chunk file was whole: now the
// restarted worker takes each back from its chunk file and serves it, byte for byte.
TEST(IntegrityTest, AWorkerWhoseIndexTableIsDamagedServesEveryBlockWhoseChunkFileIsWhole) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  std::map<std::string, std::string> stored;
  for (int i = 0; i < 24; ++i) {
    const std::string id = "rdd_2_" + std::to_string(i);
    stored[id] = RandomBytes(kChunk + 4096 * i, 100 + i);
    CommandResult put = cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY"}, stored[id]);
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }
  std::vector<std::string> ids;
  for (const auto& [id, bytes] : stored) ids.push_back(id);

  cluster.KillWorker("w1");
  const std::string table = FlushedTableFile(cluster.worker_disk_dir("w1"));
  ASSERT_FALSE(table.empty());
  const uint64_t table_size = std::filesystem::file_size(table);
  ASSERT_LT(table_size, 64u << 10) << "only the blocks' metadata is in the table";
  for (int i = 1; i <= 3; ++i) {
    std::fstream file(table, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(table_size * i / 4);
    file.seekg(at);
    char byte = 0;
    ASSERT_TRUE(file.get(byte).good());
    byte = static_cast<char>(byte ^ (1 << i));
    file.seekp(at);
    ASSERT_TRUE(file.put(byte).good());
  }

  const std::string log_path = cluster.dir().Sub("w1.log");
  const size_t log_before = ReadFile(log_path).size();
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const std::string& id : ids) {
          if (!cluster.WorkerHolds("w1", id)) return false;
        }
        return true;
      },
      15s))
      << cluster.LogTail("w1");
  const std::string log = ReadFile(log_path).substr(log_before);
  EXPECT_NE(log.find("rebuilt 24 blocks from their chunk files"), std::string::npos) << log;
  EXPECT_EQ(log.find(" lost: "), std::string::npos) << log;
  for (const auto& [id, bytes] : stored) {
    CommandResult got = cluster.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_TRUE(got.out == bytes) << id << " came back with different bytes";
  }
}

// One bit flipped on the wire in the bytes of a put: the worker refuses the piece (its digest
// does not match), the client sends it again, and the block holds exactly what was put.
TEST(IntegrityTest, APutPieceCorruptedInTransitIsRefusedAndSentAgain) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TcpProxy proxy(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkerBehind(proxy, {"w1", "64MiB", ""}));
  const std::string marker = "bytes-in-transit-0123456789-";
  std::string bytes;
  while (bytes.size() < (3 << 20)) bytes += marker + std::to_string(bytes.size()) + "-";

  proxy.CorruptOnce(marker);
  CommandResult put = cluster.Bmctl({"put", "rdd_1_0", "-"}, bytes);
  ASSERT_EQ(put.exit_code, 0) << put.err << cluster.LogTail("w1");
  ASSERT_TRUE(proxy.corrupted()) << "the proxy should have flipped a bit of the put";
  CommandResult got = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes) << "the block holds other bytes than were put";
  EXPECT_NE(ReadFile(cluster.dir().Sub("w1.log")).find("corrupted in transit"), std::string::npos)
      << cluster.LogTail("w1");
}

// A put of several pieces keeps a window of them in flight: when the second is corrupted on
// the wire, the pieces sent behind it are refused without ending the upload, and all are sent
// again from the corrupted one.
TEST(IntegrityTest, APieceCorruptedInsideAWindowIsResentWithThePiecesBehindIt) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TcpProxy proxy(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkerBehind(proxy, {"w1", "64MiB", ""}));
  // The marker only from 6 MiB on: inside the second 4 MiB piece of a 20 MiB block.
  const std::string marker = "bytes-in-transit-0123456789-";
  std::string bytes;
  while (bytes.size() < (6 << 20)) bytes += "filler-" + std::to_string(bytes.size()) + "-";
  while (bytes.size() < (20 << 20)) bytes += marker + std::to_string(bytes.size()) + "-";

  proxy.CorruptOnce(marker);
  CommandResult put = cluster.Bmctl({"put", "rdd_1_0", "-"}, bytes);
  ASSERT_EQ(put.exit_code, 0) << put.err << cluster.LogTail("w1");
  ASSERT_TRUE(proxy.corrupted()) << "the proxy should have flipped a bit of the put";
  CommandResult got = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes) << "the block holds other bytes than were put";
  EXPECT_NE(ReadFile(cluster.dir().Sub("w1.log")).find("corrupted in transit"), std::string::npos)
      << cluster.LogTail("w1");
}

// Issue 32, item 2: one bit flipped on the wire in the reply to a get of a block with a single
// copy. The worker re-reads its copy, finds it intact, and the client reads it again: the get
// returns the bytes that were put instead of failing with "corrupt on every copy".
TEST(IntegrityTest, ABitFlippedInTransitOnASingleCopyGetIsReadAgainNotCalledDataLoss) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TcpProxy proxy(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkerBehind(proxy, {"w1", "64MiB", ""}));
  const std::string marker = "single-copy-in-transit-";
  std::string bytes;
  while (bytes.size() < 3 * kChunk) bytes += marker + std::to_string(bytes.size()) + "-";
  CommandResult put = cluster.Bmctl({"put", "rdd_6_0", "-", "--level", "MEMORY_ONLY"}, bytes);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  proxy.CorruptReplyOnce(marker);
  // Over TCP, through the proxy: a read through shared memory would not cross it.
  CommandResult got = cluster.Bmctl({"get", "rdd_6_0", "--no-local-reads"});
  ASSERT_TRUE(proxy.corrupted()) << "the proxy should have flipped a bit of the reply";
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == bytes) << "the get returned other bytes than were put";
  EXPECT_NE(got.err.find("corrupted in transit"), std::string::npos) << got.err;
  EXPECT_TRUE(LogHasLineWith(cluster.dir().Sub("w1.log"), {"rdd_6_0", "corrupted in transit"}))
      << cluster.LogTail("w1");
  // The copy was not dropped: it is still the block's one location.
  EXPECT_EQ(cluster.Locations({"rdd_6_0"})["rdd_6_0"].size(), 1u);
}

// One bit flipped on the wire in a getBlocks reply: the block it hit fails its digests on the
// client, which reads it again alone; GetManyChunks, which hands out views of the received
// frames instead of copies, returns exactly the bytes that were put.
TEST(IntegrityTest, GetManyChunksChecksEveryBlockAgainstItsDigests) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TcpProxy proxy(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkerBehind(proxy, {"w1", "64MiB", ""}));
  const std::string marker = "bytes-in-transit-0123456789-";
  // Over TCP, through the proxy: reads through shared memory would not cross it.
  ClientOptions options = cluster.ClientOptionsFor();
  options.local_reads = false;
  Client client(options);
  std::vector<BlockId> ids;
  std::vector<std::string> stored;
  for (uint64_t p = 0; p < 32; ++p) {
    ids.push_back(BlockId::Rdd(4, p));
    std::string bytes;
    while (bytes.size() < 4000) bytes += marker + std::to_string(p) + "-";
    stored.push_back(bytes);
    std::vector<std::byte> data(reinterpret_cast<const std::byte*>(bytes.data()),
                                reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    ASSERT_TRUE(client.Put(ids.back(), data, StorageLevel::kMemoryOnly).ok());
  }
  proxy.CorruptReplyOnce(marker);
  std::vector<Result<BlockData>> got = client.GetManyChunks(ids);
  ASSERT_TRUE(proxy.corrupted()) << "the proxy should have flipped a bit of the reply";
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    const std::vector<std::byte> bytes = got[i]->Flatten();
    EXPECT_TRUE(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()) == stored[i])
        << ids[i].ToString() << " came back with different bytes";
  }
}

// A stored copy whose bytes no longer match their digests (scrubbers off, so only readers can
// tell): a get reads the block's other copy, and a block whose only copy is bad fails with
// "corrupt on every copy" and writes nothing to the output file.
TEST(IntegrityTest, GetManyChecksEveryBlockAndReadsPastACorruptCopy) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w2")));
  // Small blocks, so getBlocks carries them whole, two copies each.
  std::vector<BlockId> ids;
  std::map<std::string, std::string> stored;
  for (uint64_t p = 0; p < 4; ++p) {
    ids.push_back(BlockId::Rdd(3, p));
    const std::string id = ids.back().ToString();
    stored[id] = RandomBytes(100 * 1024, 70 + p);
    ASSERT_EQ(cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2"}, stored[id]).exit_code, 0);
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& [id, where] :
             cluster.Locations({"rdd_3_0", "rdd_3_1", "rdd_3_2", "rdd_3_3"})) {
          if (where.size() != 2) return false;
        }
        return true;
      },
      10s));
  // Whichever worker a batch goes to, half of its blocks are bad there.
  cluster.KillWorker("w1");
  cluster.KillWorker("w2");
  for (const char* id : {"rdd_3_0", "rdd_3_1"}) {
    ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w1"), id));
  }
  for (const char* id : {"rdd_3_2", "rdd_3_3"}) {
    ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w2"), id));
  }
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w2")));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));

  Client client(cluster.ClientOptionsFor());
  std::vector<Result<std::vector<std::byte>>> got = client.GetMany(ids);
  ASSERT_EQ(got.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << ids[i].ToString() << ": " << got[i].status().ToString();
    const std::string& expected = stored[ids[i].ToString()];
    EXPECT_TRUE(std::equal(got[i]->begin(), got[i]->end(),
                           reinterpret_cast<const std::byte*>(expected.data()),
                           reinterpret_cast<const std::byte*>(expected.data()) + expected.size()) &&
                got[i]->size() == expected.size())
        << ids[i].ToString() << " came back with different bytes";
  }
}

TEST(IntegrityTest, AGetReadsPastACorruptCopyAndFailsWhenEveryCopyIsCorrupt) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w2")));
  std::map<std::string, std::string> stored;
  // rdd_1_0 and rdd_1_1 have a copy on each worker; rdd_2_0 only one, on w1.
  for (const std::string id : {"rdd_1_0", "rdd_1_1"}) {
    stored[id] = RandomBytes(2 * kChunk + 5, id.size() + id.back());
    ASSERT_EQ(cluster.Bmctl({"put", id, "-", "--level", "DISK_ONLY_2"}, stored[id]).exit_code, 0);
  }
  const std::string single = RandomBytes(kChunk, 42);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_2_0", "-", "--level", "DISK_ONLY", "--worker", "w1"}, single)
                .exit_code,
            0);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto locations = cluster.Locations({"rdd_1_0", "rdd_1_1"});
        return locations["rdd_1_0"].size() == 2 && locations["rdd_1_1"].size() == 2;
      },
      10s));

  // Whichever copy a reader tries first, one of the two blocks has it bad.
  cluster.KillWorker("w1");
  cluster.KillWorker("w2");
  ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w1"), "rdd_1_0"));
  ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w1"), "rdd_2_0"));
  ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w2"), "rdd_1_1"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w2")));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));

  for (const auto& [id, bytes] : stored) {
    CommandResult got = cluster.Bmctl({"get", id});
    ASSERT_EQ(got.exit_code, 0) << id << ": " << got.err;
    EXPECT_TRUE(got.out == bytes) << id << " came back with different bytes";
  }
  const std::string output = cluster.dir().Sub("rdd_2_0.out");
  CommandResult bad = cluster.Bmctl({"get", "rdd_2_0", "-o", output});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("corrupt on every copy"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(output)) << "no byte of a corrupt block is written";
  CommandResult to_stdout = cluster.Bmctl({"get", "rdd_2_0"});
  EXPECT_EQ(to_stdout.exit_code, 1);
  EXPECT_TRUE(to_stdout.out.empty()) << to_stdout.out.size() << " bytes written to stdout";

  // The readers reported the copies they found bad, which their workers dropped; bmctl verify
  // finds the others. The master restores two good copies of each block.
  CommandResult verify = cluster.Bmctl({"verify", "--rdd", "1"});
  EXPECT_TRUE(verify.exit_code == 0 || verify.exit_code == 1) << verify.err;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto locations = cluster.Locations({"rdd_1_0", "rdd_1_1"});
        return locations["rdd_1_0"].size() == 2 && locations["rdd_1_1"].size() == 2 &&
               cluster.Bmctl({"verify", "rdd_1_0", "rdd_1_1"}).exit_code == 0;
      },
      20s))
      << cluster.Bmctl({"verify", "rdd_1_0", "rdd_1_1"}).out << cluster.LogTail("master");
  EXPECT_NE(ReadFile(cluster.dir().Sub("w1.log")).find("block rdd_1_0 lost"), std::string::npos);
  EXPECT_NE(ReadFile(cluster.dir().Sub("w2.log")).find("block rdd_1_1 lost"), std::string::npos);
  CommandResult intact = cluster.Bmctl({"verify", "--worker", "w1"});
  EXPECT_EQ(intact.exit_code, 0) << intact.out << intact.err;
  EXPECT_NE(intact.out.find("rdd_1_1  w1  intact (disk, digests checked)"), std::string::npos)
      << intact.out;
  EXPECT_EQ(intact.out.find("rdd_2_0"), std::string::npos) << "its only copy was dropped";
}

// The copier checks what it copies against the digests (CopyBlock), and the source of a copy
// that fails that check verifies its own: it drops it and reports it lost at once, instead of
// being asked for the same bad bytes again until a scrub finds them.
TEST(IntegrityTest, AReplicationSourceWhoseBytesFailTheCopiersCheckDropsItsCopy) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/2);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w2")));
  const std::string bytes = RandomBytes(2 * kChunk + 5, 4);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_4_0", "-", "--level", "DISK_ONLY_2"}, bytes).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return cluster.Locations({"rdd_4_0"})["rdd_4_0"].size() == 2; }, 10s));

  cluster.KillWorker("w1");
  ASSERT_NO_FATAL_FAILURE(CorruptFirstChunk(cluster.worker_disk_dir("w1"), "rdd_4_0"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w1")));
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  ASSERT_TRUE(cluster.WorkerHolds("w1", "rdd_4_0"));
  // w2's copy goes with w2: the master has w1, the only holder left, copy the block to w3.
  cluster.KillWorker("w2");
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(Unscrubbed("w3")));

  const std::string log_path = cluster.dir().Sub("w1.log");
  EXPECT_TRUE(WaitFor(
      [&] {
        return !cluster.WorkerHolds("w1", "rdd_4_0") &&
               ReadFile(log_path).find("block rdd_4_0 lost") != std::string::npos;
      },
      20s))
      << cluster.LogTail("w1") << cluster.LogTail("master");
  EXPECT_FALSE(cluster.WorkerHolds("w3", "rdd_4_0")) << "a copy was made of bad bytes";
  EXPECT_NE(ReadFile(log_path).find("could not copy rdd_4_0"), std::string::npos);
}

}  // namespace
}  // namespace bm::testing

namespace bm::testing {
namespace {

// What a reader computes for a block: BlockDigestOf the XXH3 of each 1 MiB unit of its bytes.
uint64_t ExpectedBlockDigest(const std::string& bytes) {
  std::vector<uint64_t> units;
  for (size_t pos = 0; pos < bytes.size(); pos += kDigestUnitBytes) {
    const std::string_view unit = std::string_view(bytes).substr(pos, kDigestUnitBytes);
    units.push_back(DigestOf(std::as_bytes(std::span(unit.data(), unit.size()))));
  }
  return BlockDigestOf(units);
}

TEST(IntegrityTest, APutsBlockDigestIsKeptByTheMasterForEveryCopyAndShownByBmctl) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/30);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  const std::string on_disk = RandomBytes(2 * kChunk + 333, 41);
  const std::string in_memory = RandomBytes(5000, 42);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_3_0", "-", "--level", "DISK_ONLY_2"}, on_disk).exit_code, 0);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_3_1", "-", "--level", "MEMORY_ONLY"}, in_memory).exit_code,
            0);
  // Both copies of the two-copy block are listed: the replica carries the put's digest.
  ASSERT_TRUE(WaitFor([&] { return cluster.Locations({"rdd_3_0"})["rdd_3_0"].size() == 2; }, 10s))
      << cluster.LogTail("master");

  const std::string disk_digest = DigestHex(ExpectedBlockDigest(on_disk));
  const std::string memory_digest = DigestHex(ExpectedBlockDigest(in_memory));
  const nlohmann::json locations =
      cluster.BmctlJson({"locations", "rdd_3_0", "rdd_3_1", "rdd_3_2"});
  ASSERT_EQ(locations.size(), 3u) << locations.dump();
  EXPECT_EQ(locations[0].at("digest"), disk_digest) << locations.dump();
  EXPECT_EQ(locations[1].at("digest"), memory_digest) << locations.dump();
  EXPECT_TRUE(locations[2].at("digest").is_null()) << locations.dump();
  const nlohmann::json blocks = cluster.BmctlJson({"blocks", "--rdd", "3"});
  ASSERT_EQ(blocks.size(), 2u) << blocks.dump();
  EXPECT_EQ(blocks[0].at("digest"), disk_digest) << blocks.dump();

  CommandResult table = cluster.Bmctl({"locations", "rdd_3_0"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("DIGEST"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(disk_digest), std::string::npos) << table.out;

  // A whole-block read checks the worker's unit digests against the master's digest: a
  // matching block reads back intact.
  CommandResult got = cluster.Bmctl({"get", "rdd_3_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == on_disk);
  EXPECT_EQ(cluster.LogTail("master").find("but the version's digest"), std::string::npos);
}

}  // namespace
}  // namespace bm::testing
