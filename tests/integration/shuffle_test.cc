// Shuffles with real processes: mappers push pieces into partition streams, reducers read each
// partition once; a duplicate or uncommitted attempt never reaches a reader; two copies survive
// a killed worker; a lost single copy names the maps to run again; the master's journal keeps
// shuffles across a restart; hostile requests are refused.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blockmgr/client.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/tmpfs_mount.h"

namespace bm::testing {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> Bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string Text(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// What map `map` writes into `partition`: distinct per map, partition and attempt, in several
// writes so a partition's output crosses piece boundaries.
std::string OutputOf(uint32_t map, uint32_t partition, uint32_t attempt, size_t size) {
  return RandomBytes(size, (uint64_t{map} << 40) ^ (uint64_t{partition} << 20) ^ attempt);
}

// Runs map `map` (attempt `attempt`) of the shuffle: every partition gets OutputOf(...).
Status RunMap(Client& client, const ShuffleSpec& spec, uint32_t map, uint32_t attempt, size_t size,
              bool commit = true, ShuffleWriterOptions options = {}) {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleWriter> writer,
                      client.OpenShuffleWriter(spec.id, map, attempt, options));
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    const std::string output = OutputOf(map, partition, attempt, size);
    const size_t half = output.size() / 2;
    BM_RETURN_IF_ERROR(writer->Write(partition, Bytes(output.substr(0, half))));
    BM_RETURN_IF_ERROR(writer->Write(partition, Bytes(output.substr(half))));
  }
  return commit ? writer->Commit() : writer->Flush();
}

// A partition as a reader sees it: each map's bytes, concatenated in the order they came.
Result<std::map<uint32_t, std::string>> ReadPartition(Client& client, uint64_t shuffle_id,
                                                      uint32_t partition,
                                                      std::vector<uint32_t>* missing = nullptr) {
  BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleReader> reader,
                      client.OpenShuffleReader(shuffle_id, partition));
  std::map<uint32_t, std::string> by_map;
  Status read = reader->ForEach([&](uint32_t map, std::span<const std::byte> bytes) {
    by_map[map] += Text(bytes);
    return Status::Ok();
  });
  if (missing != nullptr) *missing = reader->missing_maps();
  BM_RETURN_IF_ERROR(read);
  return by_map;
}

// What the worker answers a read of the shuffle, once it answers notFound (the master's
// removeShuffle reached it) or after about 2 s of asking.
Status AwaitWorkerForgets(RpcChannel& worker, uint64_t shuffle_id) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initReadShuffle().setShuffleId(shuffle_id);
  Status read;
  for (int i = 0; i < 200 && read.code() != StatusCode::kNotFound; ++i) {
    read = worker.Call(message).status();
    if (read.code() != StatusCode::kNotFound) std::this_thread::sleep_for(10ms);
  }
  return read;
}

// A client on the workers' host: it reads partitions through their local-read sockets unless
// `local_reads` is off (then over TCP, as from another host).
// Map 0 attempt 0 writes half of each partition's OutputOf(..., size) and flushes; then the
// primary of partition 0 (`victim`) is killed, and the map writes the rest and commits, which
// must succeed.
void CommitWithPrimaryKilledMidMap(LocalCluster& cluster, Client& client, const ShuffleSpec& spec,
                                   const ShuffleLayout& layout, size_t size,
                                   const ShuffleWriterOptions& options, std::string& victim) {
  Result<std::unique_ptr<ShuffleWriter>> writer = client.OpenShuffleWriter(spec.id, 0, 0, options);
  ASSERT_TRUE(writer.ok());
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    const std::string output = OutputOf(0, partition, 0, size);
    ASSERT_TRUE((*writer)->Write(partition, Bytes(output.substr(0, size / 2))).ok());
  }
  ASSERT_TRUE((*writer)->Flush().ok());
  victim = layout.workers[layout.primaries[0]].worker_id;
  cluster.SignalWorker(victim, SIGKILL);
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    const std::string output = OutputOf(0, partition, 0, size);
    ASSERT_TRUE((*writer)->Write(partition, Bytes(output.substr(size / 2))).ok());
  }
  Status committed = (*writer)->Commit();
  ASSERT_TRUE(committed.ok()) << committed.ToString();
}

ClientOptions ClientFor(const LocalCluster& cluster, bool local_reads = true) {
  ClientOptions options = cluster.ClientOptionsFor();
  options.request_timeout = 3000ms;
  options.local_reads = local_reads;
  return options;
}

TEST(ShuffleTest, EveryCommittedPieceIsReadOnceAndByteExact) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 7, .maps = 6, .partitions = 5};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::set<std::string> used;
  for (uint32_t index : layout->primaries) used.insert(layout->workers[index].worker_id);
  EXPECT_EQ(used.size(), 3u);  // spread over every worker
  // Small pieces, and pieces cut from one partition's output (max_piece_bytes 64 KiB).
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ShuffleWriterOptions options{.max_piece_bytes = 64 << 10, .batch_bytes = 128 << 10};
    ASSERT_TRUE(RunMap(client, spec, map, 0, map % 2 == 0 ? 3000 : 200000, true, options).ok());
  }
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(read->size(), spec.maps);
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(read->at(map), OutputOf(map, partition, 0, map % 2 == 0 ? 3000 : 200000))
          << "map " << map << " partition " << partition;
    }
  }
  Result<std::vector<ShuffleSummary>> listed = client.Shuffles();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().committed_maps, spec.maps);
  EXPECT_EQ(listed->front().bytes, spec.partitions * 3 * (3000 + 200000));
}

// Pieces that straddle ZeroMQ frames both ways: pushes of 6 MiB batches (frames of 4 MiB) and
// read pages of up to 16 MiB, with pieces of 999,999 bytes.
TEST(ShuffleTest, PiecesAcrossFrameBoundariesArriveWhole) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 8, .maps = 2, .partitions = 2};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  const ShuffleWriterOptions options{.max_piece_bytes = 999999, .batch_bytes = 6 << 20};
  for (uint32_t map = 0; map < spec.maps; ++map) {
    Status ran = RunMap(client, spec, map, 0, 5000000, true, options);
    ASSERT_TRUE(ran.ok()) << ran.ToString();
  }
  // Over TCP (frames) and through the local socket (pages too big for a packet: regions).
  Client over_tcp(ClientFor(cluster, /*local_reads=*/false));
  for (Client* reader : {&over_tcp, &client}) {
    for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
      Result<std::map<uint32_t, std::string>> read = ReadPartition(*reader, spec.id, partition);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      for (uint32_t map = 0; map < spec.maps; ++map) {
        EXPECT_TRUE(read->at(map) == OutputOf(map, partition, 0, 5000000)) << map;
      }
    }
  }
}

TEST(ShuffleTest, DuplicateAndUncommittedAttemptsNeverReachAReader) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 1, .maps = 3, .partitions = 4};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  // Map 0: a speculative attempt 1 commits first; the original attempt 0 finishes later.
  ASSERT_TRUE(RunMap(client, spec, 0, 1, 5000).ok());
  Status late = RunMap(client, spec, 0, 0, 5000);
  EXPECT_EQ(late.code(), StatusCode::kAborted) << late.ToString();
  // Map 1: an attempt that failed before committing, then its retry.
  ASSERT_TRUE(RunMap(client, spec, 1, 0, 5000, /*commit=*/false).ok());
  ASSERT_TRUE(RunMap(client, spec, 1, 1, 5000).ok());
  // Map 2's attempt 0 pushes but never commits: a reader is told the map has no output yet.
  ASSERT_TRUE(RunMap(client, spec, 2, 0, 5000, /*commit=*/false).ok());
  std::vector<uint32_t> missing;
  Result<std::map<uint32_t, std::string>> early = ReadPartition(client, spec.id, 0, &missing);
  EXPECT_EQ(early.status().code(), StatusCode::kDataLoss) << early.status().ToString();
  EXPECT_EQ(missing, std::vector<uint32_t>{2});
  // Its retry, attempt 1, commits: only attempt 1's pieces are read, attempt 0's never.
  ASSERT_TRUE(RunMap(client, spec, 2, 1, 5000).ok());
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(read->size(), 3u) << "partition " << partition;
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(read->at(map), OutputOf(map, partition, 1, 5000)) << map << "/" << partition;
    }
  }
  // A commit repeated by the same attempt (its reply was lost) is fine.
  Result<std::unique_ptr<ShuffleWriter>> again = client.OpenShuffleWriter(spec.id, 0, 1);
  ASSERT_TRUE(again.ok());
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    const std::string output = OutputOf(0, partition, 1, 5000);
    const size_t half = output.size() / 2;
    ASSERT_TRUE((*again)->Write(partition, Bytes(output.substr(0, half))).ok());
    ASSERT_TRUE((*again)->Write(partition, Bytes(output.substr(half))).ok());
  }
  EXPECT_TRUE((*again)->Commit().ok());
  Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, 2);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->at(0), OutputOf(0, 2, 1, 5000));  // kept once
}

TEST(ShuffleTest, TwoCopiesKeepEveryPartitionWhenAWorkerIsKilled) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 3, .maps = 4, .partitions = 6, .level = StorageLevel::kMemoryOnly2};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (uint32_t p = 0; p < spec.partitions; ++p) {
    EXPECT_NE(layout->primaries[p], layout->replicas[p]);
  }
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ASSERT_TRUE(RunMap(client, spec, map, 0, 20000).ok());
  }
  const std::string victim = layout->workers[layout->primaries[0]].worker_id;
  cluster.SignalWorker(victim, SIGKILL);
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << "partition " << partition << ": " << read.status().ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(read->at(map), OutputOf(map, partition, 0, 20000));
    }
  }
}

TEST(ShuffleTest, ALostSingleCopyNamesTheMapsAndRunningThemAgainMakesItWhole) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 4, .maps = 3, .partitions = 2};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok());
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ASSERT_TRUE(RunMap(client, spec, map, 0, 1000).ok());
  }
  const std::string victim = layout->workers[layout->primaries[1]].worker_id;
  cluster.SignalWorker(victim, SIGKILL);
  std::vector<uint32_t> missing;
  Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, 1, &missing);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find("partition 1 of shuffle 4"), std::string::npos)
      << read.status().message();
  EXPECT_EQ(missing, (std::vector<uint32_t>{0, 1, 2}));
  // The reader told the master: the maps are no longer committed, and a reader says so.
  Result<std::map<uint32_t, std::string>> again = ReadPartition(client, spec.id, 0, &missing);
  EXPECT_EQ(again.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(missing, (std::vector<uint32_t>{0, 1, 2}));

  // Once the master drops the dead worker its partitions move; the maps run again.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    std::vector<std::string> listed = cluster.ListedWorkers();
    if (std::find(listed.begin(), listed.end(), victim) == listed.end()) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << victim << " never dropped";
    std::this_thread::sleep_for(50ms);
  }
  for (uint32_t map = 0; map < spec.maps; ++map) {
    Status rerun = RunMap(client, spec, map, 1, 1000);
    ASSERT_TRUE(rerun.ok()) << rerun.ToString();
  }
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> whole = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(whole->at(map), OutputOf(map, partition, 1, 1000));
    }
  }
}

TEST(ShuffleTest, AMasterRestartKeepsAssignmentsAndCommits) {
  LocalCluster cluster;
  cluster.SetMasterStateDir(cluster.dir().Sub("master-state"));
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 9, .maps = 2, .partitions = 3};
  Result<ShuffleLayout> before = client.RegisterShuffle(spec);
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(RunMap(client, spec, 0, 0, 4000).ok());
  cluster.KillMaster();
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_TRUE(cluster.WaitForWorkers({"w1", "w2"}));
  Result<ShuffleLayout> after = client.ShuffleLayoutOf(spec.id);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->primaries, before->primaries);
  EXPECT_EQ(after->committed_maps, 1u);
  // Map 0's committed attempt stands; map 1 runs after the restart.
  EXPECT_EQ(RunMap(client, spec, 0, 5, 4000).code(), StatusCode::kAborted);
  ASSERT_TRUE(RunMap(client, spec, 1, 0, 4000).ok());
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->at(0), OutputOf(0, partition, 0, 4000));
    EXPECT_EQ(read->at(1), OutputOf(1, partition, 0, 4000));
  }
}

TEST(ShuffleTest, UnregisterRemovesTheDataAndHostileRequestsAreRefused) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 5, .maps = 2, .partitions = 2};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(client.RegisterShuffle({.id = 5, .maps = 3, .partitions = 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client
                .RegisterShuffle(
                    {.id = 6, .maps = 1, .partitions = 1, .level = StorageLevel::kMemoryOnly2})
                .status()
                .code(),
            StatusCode::kUnavailable);  // two copies, one worker
  EXPECT_EQ(client.ShuffleLayoutOf(99).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client.OpenShuffleWriter(5, 2, 0).status().code(), StatusCode::kInvalidArgument);

  // Straight to the worker: a piece for a partition it does not hold, a damaged piece, a
  // shuffle it does not know, a push that declares more bytes than it carries.
  zmq::context_t context;
  RpcChannel worker(context, layout->workers[0].address, 3000ms);
  auto push = [&](uint64_t shuffle, uint32_t partition, const std::string& bytes, uint64_t digest,
                  uint32_t declared) {
    capnp::MallocMessageBuilder message;
    proto::PushShuffle::Builder body = message.initRoot<proto::Request>().initPushShuffle();
    body.setShuffleId(shuffle);
    auto pieces = body.initPieces(1);
    pieces[0].setPartition(partition);
    pieces[0].setLength(declared);
    pieces[0].setDigest(digest);
    std::vector<zmq::message_t> payload;
    payload.emplace_back(bytes.data(), bytes.size());
    return worker.Call(message, std::move(payload)).status();
  };
  const std::string bytes = "piece";
  const uint64_t digest = DigestOf(Bytes(bytes));
  EXPECT_EQ(push(5, 7, bytes, digest, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(push(5, 0, bytes, digest ^ 1, 5).code(), StatusCode::kDataLoss);
  EXPECT_EQ(push(77, 0, bytes, digest, 5).code(), StatusCode::kUnavailable);
  EXPECT_EQ(push(5, 0, bytes, digest, 50).code(), StatusCode::kInvalidArgument);
  {  // A commit of a map that does not exist.
    capnp::MallocMessageBuilder message;
    proto::CommitShuffleMap::Builder commit =
        message.initRoot<proto::Request>().initCommitShuffleMap();
    commit.setShuffleId(5);
    commit.setMap(9);
    RpcChannel master(context, cluster.master_endpoint(), 3000ms);
    EXPECT_EQ(master.Call(message).status().code(), StatusCode::kInvalidArgument);
  }
  // The worker still serves.
  ASSERT_TRUE(RunMap(client, spec, 0, 0, 100).ok());
  ASSERT_TRUE(RunMap(client, spec, 1, 0, 100).ok());
  ASSERT_TRUE(ReadPartition(client, spec.id, 0).ok());

  ASSERT_TRUE(client.UnregisterShuffle(spec.id).ok());
  EXPECT_TRUE(client.UnregisterShuffle(spec.id).ok());  // again: nothing to do
  EXPECT_EQ(client.ShuffleLayoutOf(spec.id).status().code(), StatusCode::kNotFound);
  // The worker dropped the pieces (the master's command may take a moment to arrive).
  const Status gone = AwaitWorkerForgets(worker, spec.id);
  EXPECT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
}

TEST(ShuffleTest, AShuffleNobodyTouchesForTheTtlIsRemovedWithItsData) {
  LocalCluster cluster;
  cluster.SetMasterExtraArgs({"--shuffle-ttl", "1"});
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 11, .maps = 1, .partitions = 1};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok());
  ASSERT_TRUE(RunMap(client, spec, 0, 0, 100).ok());
  const auto registered = std::chrono::steady_clock::now();
  Status gone;
  while (gone.code() != StatusCode::kNotFound &&
         std::chrono::steady_clock::now() - registered < 20s) {
    std::this_thread::sleep_for(100ms);
    gone = client.ShuffleLayoutOf(spec.id, std::nullopt).status();
    // Asking does not count as touching it once it is gone; before, it touches it, so the
    // test stops asking for a while and lets it expire.
    if (gone.ok()) std::this_thread::sleep_for(1500ms);
  }
  ASSERT_EQ(gone.code(), StatusCode::kNotFound) << gone.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - registered, 1s);
  // And the worker dropped its pieces.
  zmq::context_t context;
  RpcChannel worker(context, layout->workers[0].address, 3000ms);
  const Status read = AwaitWorkerForgets(worker, spec.id);
  EXPECT_EQ(read.code(), StatusCode::kNotFound) << read.ToString();
}

// A counter of a worker's /metrics; nullopt when it does not answer or has no such sample.
std::optional<uint64_t> WorkerMetric(LocalCluster& cluster, const std::string& worker,
                                     const std::string& name) {
  httplib::Client http("127.0.0.1", cluster.HttpPort(worker));
  httplib::Result metrics = http.Get("/metrics");
  if (!metrics || metrics->status != 200) return std::nullopt;
  const size_t at = metrics->body.find("\n" + name + " ");
  if (at == std::string::npos) return std::nullopt;
  return std::stoull(metrics->body.substr(at + name.size() + 2));
}

// Whether everything the worker was pushed is in its partition files: each piece's bytes
// with its record header.
bool EverythingPushedIsOnDisk(LocalCluster& cluster, const std::string& worker) {
  std::optional<uint64_t> pieces =
      WorkerMetric(cluster, worker, "blockmgr_worker_shuffle_pieces_pushed_total");
  std::optional<uint64_t> pushed =
      WorkerMetric(cluster, worker, "blockmgr_worker_shuffle_pushed_bytes_total");
  std::optional<uint64_t> flushed =
      WorkerMetric(cluster, worker, "blockmgr_worker_shuffle_flushed_bytes_total");
  return pieces && pushed && flushed && *pieces > 0 && *flushed == *pushed + 32 * *pieces;
}

// _2: the writer pushes each piece once, to the partition's primary, which forwards it to the
// replica (Kafka's acks=all, Celeborn's primary-to-replica push): every byte leaves the writer
// once, is forwarded once, and is held twice.
TEST(ShuffleTest, APrimaryForwardsEachPushToItsReplicaAndTheWriterSendsItOnce) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  const std::vector<std::string> workers = {"w1", "w2", "w3"};
  for (const std::string& id : workers) {
    ASSERT_NO_FATAL_FAILURE(
        cluster.StartWorker({.id = id, .extra_args = {"--http", "127.0.0.1:0"}}));
  }
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 23, .maps = 3, .partitions = 6, .level = StorageLevel::kMemoryOnly2};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  const size_t size = 100000;
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ASSERT_TRUE(RunMap(client, spec, map, 0, size).ok());
  }
  const uint64_t written = uint64_t{spec.maps} * spec.partitions * size;
  uint64_t held = 0;
  uint64_t forwarded = 0;
  for (const std::string& id : workers) {
    std::optional<uint64_t> pushed =
        WorkerMetric(cluster, id, "blockmgr_worker_shuffle_pushed_bytes_total");
    std::optional<uint64_t> sent_on =
        WorkerMetric(cluster, id, "blockmgr_worker_shuffle_forwarded_bytes_total");
    ASSERT_TRUE(pushed && sent_on) << id << " has no shuffle metrics";
    held += *pushed;
    forwarded += *sent_on;
  }
  EXPECT_EQ(held, 2 * written);   // two copies of every byte
  EXPECT_EQ(forwarded, written);  // one of them forwarded by its primary
  // Each copy alone is whole: the replica's by itself once every primary is gone is checked by
  // TwoCopiesKeepEveryPartitionWhenAWorkerIsKilled; here the reader takes the primaries'.
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_TRUE(read->at(map) == OutputOf(map, partition, 0, size)) << "bytes differ";
    }
  }
}

TEST(ShuffleTest, AWorkerRestartKeepsTheCommittedPartitionsItWroteToDisk) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  for (const char* id : {"w1", "w2"}) {
    ASSERT_NO_FATAL_FAILURE(
        cluster.StartWorker({.id = id, .extra_args = {"--http", "127.0.0.1:0"}}));
  }
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 21, .maps = 3, .partitions = 4};
  const ShuffleSpec other{.id = 22, .maps = 1, .partitions = 2};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  ASSERT_TRUE(client.RegisterShuffle(other).ok());
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ASSERT_TRUE(RunMap(client, spec, map, 0, 300000).ok());
  }
  ASSERT_TRUE(RunMap(client, other, 0, 0, 1000).ok());
  // Both workers wrote what they hold to their partition files (within the flush delay).
  for (const char* id : {"w1", "w2"}) {
    ASSERT_TRUE(WaitFor([&] { return EverythingPushedIsOnDisk(cluster, id); }, 20s))
        << id << " never wrote its pieces to disk";
  }
  // kill -9: nothing is written at exit. Meanwhile the other shuffle goes.
  cluster.SignalWorker("w1", SIGKILL);
  ASSERT_TRUE(client.UnregisterShuffle(other.id).ok());
  const std::filesystem::path other_dir =
      std::filesystem::path(cluster.worker_disk_dir("w1")) / "shuffle" / "22";
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker({.id = "w1", .extra_args = {"--http", "127.0.0.1:0"}}));
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    std::vector<uint32_t> missing;
    Result<std::map<uint32_t, std::string>> read =
        ReadPartition(client, spec.id, partition, &missing);
    ASSERT_TRUE(read.ok()) << "partition " << partition << ": " << read.status().ToString() << " ("
                           << missing.size() << " maps missing)";
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(read->at(map), OutputOf(map, partition, 0, 300000))
          << "map " << map << " partition " << partition;
    }
  }
  // The restarted worker reported the shuffle it kept that is gone; the master had it removed.
  EXPECT_TRUE(WaitFor([&] { return !std::filesystem::exists(other_dir); }, 20s))
      << other_dir << " is still there";
}

TEST(ShuffleTest, AReaderAsksForTheNextPageWhileItVisitsThisOne) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker({.id = "w1", .extra_args = {"--http", "127.0.0.1:0"}}));
  Client client(ClientFor(cluster, /*local_reads=*/false));  // counts TCP reads
  const ShuffleSpec spec{.id = 41, .maps = 1, .partitions = 1};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  const size_t size = 3 * kMaxPieceBytes;  // pages of at most kMaxPieceBytes: several
  ASSERT_TRUE(RunMap(client, spec, 0, 0, size).ok());
  auto reads_answered = [&] {
    return WorkerMetric(cluster, "w1",
                        "blockmgr_worker_requests_total{op=\"shuffle_read\",result=\"ok\"}")
        .value_or(0);
  };
  Result<std::unique_ptr<ShuffleReader>> reader = client.OpenShuffleReader(spec.id, 0);
  ASSERT_TRUE(reader.ok());
  bool first = true;
  bool asked_ahead = false;
  std::string read;
  Status all = (*reader)->ForEach([&](uint32_t, std::span<const std::byte> bytes) {
    if (first) {
      // Still inside the first page: the worker has answered the second already.
      asked_ahead = WaitFor([&] { return reads_answered() >= 2; }, 10s);
      first = false;
    }
    read += Text(bytes);
    return Status::Ok();
  });
  ASSERT_TRUE(all.ok()) << all.ToString();
  EXPECT_TRUE(asked_ahead);
  EXPECT_EQ(read, OutputOf(0, 0, 0, size));
}

TEST(ShuffleTest, APartitionPastItsSplitSizeContinuesOnOtherWorkersAndReadsFollowIt) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  for (const char* id : {"w1", "w2", "w3"}) {
    ASSERT_NO_FATAL_FAILURE(
        cluster.StartWorker({.id = id, .extra_args = {"--shuffle-split-size", "1MiB"}}));
  }
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 51, .maps = 4, .partitions = 2, .level = StorageLevel::kMemoryOnly2};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  const size_t size = 3 << 20;  // 12 MiB per partition, in streams of about 1 MiB
  for (uint32_t map = 0; map < spec.maps; ++map) {
    Status ran = RunMap(client, spec, map, 0, size);
    ASSERT_TRUE(ran.ok()) << "map " << map << ": " << ran.ToString();
  }
  Result<ShuffleLayout> layout = client.ShuffleLayoutOf(spec.id);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    std::vector<ShuffleLayout::Stream> streams = layout->StreamsOf(partition);
    EXPECT_GE(streams.size(), 4u) << "partition " << partition;
    std::set<std::string> holders;
    for (const ShuffleLayout::Stream& stream : streams) {
      holders.insert(layout->workers[stream.primary].worker_id);
      ASSERT_TRUE(stream.replica.has_value());
      EXPECT_NE(stream.primary, *stream.replica);
    }
    EXPECT_EQ(holders.size(), 3u) << "partition " << partition << " stayed on " << holders.size();
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << "partition " << partition << ": " << read.status().ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_EQ(read->at(map), OutputOf(map, partition, 0, size))
          << "map " << map << " partition " << partition;
    }
  }
}

TEST(ShuffleTest, AWriterWhoseWorkerIsKilledFollowsItsStreamsToTheirNewWorkers) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(3));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 61, .maps = 2, .partitions = 3, .level = StorageLevel::kMemoryOnly2};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const size_t size = 400000;
  // A holder of partition 0 dies mid-map. Answered, not left waiting: once the master drops
  // the worker its streams move and the writer follows them.
  std::string victim;
  ASSERT_NO_FATAL_FAILURE(
      CommitWithPrimaryKilledMidMap(cluster, client, spec, *layout, size, {}, victim));
  ASSERT_TRUE(RunMap(client, spec, 1, 0, size).ok());
  Result<ShuffleLayout> after = client.ShuffleLayoutOf(spec.id);
  ASSERT_TRUE(after.ok());
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    EXPECT_NE(after->workers[after->primaries[partition]].worker_id, victim);
    EXPECT_NE(after->workers[after->replicas[partition]].worker_id, victim);
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << "partition " << partition << ": " << read.status().ToString();
    for (uint32_t map = 0; map < spec.maps; ++map) {
      // (Compared without printing 3 MiB on a failure.)
      const std::string& got = read->at(map);
      EXPECT_EQ(got.size(), size) << "map " << map << " partition " << partition;
      EXPECT_TRUE(got == OutputOf(map, partition, 0, size))
          << "map " << map << " partition " << partition << ": bytes differ";
    }
  }
}

// One copy, its worker killed mid-map: the pieces it had acknowledged are gone, and the rest go
// to the worker the stream moved to. Those keep their places in the map's output (sequences are
// the writer's, not restarted on the new worker), so a reader never takes a later piece for an
// earlier one: it hands over nothing of the map out of place and names it as lost.
TEST(ShuffleTest, PiecesSentToAStreamsNewWorkerKeepTheirPlaceInTheMapsOutput) {
  LocalCluster cluster(/*heartbeat_timeout_seconds=*/1);
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(2));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 62, .maps = 1, .partitions = 2, .level = StorageLevel::kMemoryOnly};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const size_t size = 400000;
  ShuffleWriterOptions options;
  options.max_piece_bytes = 64 << 10;  // several pieces on each side of the kill
  std::string victim;
  ASSERT_NO_FATAL_FAILURE(
      CommitWithPrimaryKilledMidMap(cluster, client, spec, *layout, size, options, victim));
  Result<ShuffleLayout> after = client.ShuffleLayoutOf(spec.id);
  ASSERT_TRUE(after.ok());
  ASSERT_NE(after->workers[after->primaries[0]].worker_id, victim);

  // The new worker holds the second half of the map's pieces; the first half died with the
  // victim. Whatever the reader hands over of the map must be where it belongs: a prefix.
  Result<std::unique_ptr<ShuffleReader>> reader = client.OpenShuffleReader(spec.id, 0);
  ASSERT_TRUE(reader.ok());
  std::string delivered;
  Status read = (*reader)->ForEach([&](uint32_t, std::span<const std::byte> bytes) {
    delivered += Text(bytes);
    return Status::Ok();
  });
  EXPECT_EQ(read.code(), StatusCode::kDataLoss) << read.ToString();
  EXPECT_EQ((*reader)->missing_maps(), (std::vector<uint32_t>{0}));
  const std::string expected = OutputOf(0, 0, 0, size);
  EXPECT_TRUE(expected.compare(0, delivered.size(), delivered) == 0)
      << "the reader was handed " << delivered.size() << " bytes of map 0 out of place";

  // Running the map again makes the partition whole.
  Status rerun = RunMap(client, spec, 0, 1, size);
  ASSERT_TRUE(rerun.ok()) << rerun.ToString();
  Result<std::map<uint32_t, std::string>> whole = ReadPartition(client, spec.id, 0);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_TRUE(whole->at(0) == OutputOf(0, 0, 1, size)) << "bytes differ";
}

// A worker whose disk fills up under a DISK_ONLY shuffle: the push that meets the full disk fails
// with a clear error (not retried for ever, not a crash), the worker keeps serving, and once the
// shuffle is removed its room is taken again.
TEST(ShuffleTest, AFullDiskFailsThePushWithAClearErrorAndTheWorkerKeepsServing) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TmpfsMount disk(cluster.worker_disk_dir("w1"), "32m");
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): " << disk.error();
  }
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {.id = "w1", .memory = "64MiB", .extra_args = {"--shuffle-memory", "48MiB"}}));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 63, .maps = 1, .partitions = 2, .level = StorageLevel::kDiskOnly};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  Result<std::unique_ptr<ShuffleWriter>> writer = client.OpenShuffleWriter(spec.id, 0, 0);
  ASSERT_TRUE(writer.ok());
  // More than the disk and the shuffle memory hold together: some write meets the full disk.
  const std::string mebibyte = RandomBytes(1 << 20, 63);
  Status pushed;
  for (int i = 0; i < 160 && pushed.ok(); ++i) pushed = (*writer)->Write(i % 2, Bytes(mebibyte));
  if (pushed.ok()) pushed = (*writer)->Flush();
  ASSERT_FALSE(pushed.ok()) << "80 MiB of shuffle went into 32 MiB of disk and 48 MiB of memory";
  EXPECT_EQ(pushed.code(), StatusCode::kOutOfSpace) << pushed.ToString();
  EXPECT_NE(pushed.message().find("disk"), std::string::npos) << pushed.ToString();
  EXPECT_NE(pushed.message().find("w1"), std::string::npos) << pushed.ToString();
  ASSERT_TRUE(cluster.worker_process("w1").Running()) << cluster.LogTail("w1");

  // Still serving: a block is stored and read back.
  const std::string block = RandomBytes(4096, 64);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_1_0", "-", "--level", "MEMORY_ONLY"}, block).exit_code, 0);
  CommandResult got = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(got.out == block);

  // The shuffle removed, its files go and a new one fits.
  ASSERT_TRUE(client.UnregisterShuffle(spec.id).ok());
  const ShuffleSpec next{.id = 64, .maps = 1, .partitions = 2, .level = StorageLevel::kDiskOnly};
  ASSERT_TRUE(client.RegisterShuffle(next).ok());
  Status rerun;
  ASSERT_TRUE(WaitFor([&] { return (rerun = RunMap(client, next, 0, 0, 4 << 20)).ok(); }, 10s))
      << rerun.ToString() << cluster.LogTail("w1");
  for (uint32_t partition = 0; partition < next.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, next.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_TRUE(read->at(0) == OutputOf(0, partition, 0, 4 << 20)) << "bytes differ";
  }
}

#ifdef BM_SANITIZER_BUILD
constexpr uint32_t kPushedMiB = 512;  // the same paths at a scale the sanitizers finish
#else
constexpr uint32_t kPushedMiB = 2048;
#endif

// The bytes of partition `partition` of map `map`, from byte `offset` on: 8-byte words that
// name the map, the partition and the word's place, so a piece out of place shows.
void FillStream(uint32_t map, uint32_t partition, uint64_t offset, std::span<std::byte> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t at = offset + i;
    const uint64_t word = (uint64_t{map} << 48) ^ (uint64_t{partition} << 40) ^ (at / 8);
    out[i] = static_cast<std::byte>(word >> (8 * (at % 8)));
  }
}

TEST(ShuffleTest, TwoGiBPushedThroughAWorkerWithLittleMemoryArriveWholeWithinItsMemory) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {.id = "w1", .memory = "256MiB", .extra_args = {"--shuffle-memory", "64MiB"}}));
  Client client(ClientFor(cluster));
  const uint32_t maps = 16;
  const uint32_t partitions = 8;
  const uint64_t per_stream = (uint64_t{kPushedMiB} << 20) / (maps * partitions);
  const ShuffleSpec spec{.id = 31, .maps = maps, .partitions = partitions};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  std::vector<std::byte> buffer(size_t{1} << 20);
  for (uint32_t map = 0; map < maps; ++map) {
    Result<std::unique_ptr<ShuffleWriter>> writer = client.OpenShuffleWriter(spec.id, map, 0);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (uint64_t offset = 0; offset < per_stream; offset += buffer.size()) {
      for (uint32_t partition = 0; partition < partitions; ++partition) {
        const size_t size = std::min<uint64_t>(buffer.size(), per_stream - offset);
        FillStream(map, partition, offset, std::span(buffer).first(size));
        Status written = (*writer)->Write(partition, std::span(buffer).first(size));
        ASSERT_TRUE(written.ok()) << "map " << map << ": " << written.ToString();
      }
    }
    Status committed = (*writer)->Commit();
    ASSERT_TRUE(committed.ok()) << "map " << map << ": " << committed.ToString();
  }
  // Every byte back, in each map's order.
  std::vector<std::byte> expected;
  for (uint32_t partition = 0; partition < partitions; ++partition) {
    Result<std::unique_ptr<ShuffleReader>> reader = client.OpenShuffleReader(spec.id, partition);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    std::vector<uint64_t> read(maps);
    uint64_t wrong = 0;
    Status all = (*reader)->ForEach([&](uint32_t map, std::span<const std::byte> bytes) {
      expected.resize(bytes.size());
      FillStream(map, partition, read[map], expected);
      if (std::memcmp(expected.data(), bytes.data(), bytes.size()) != 0) ++wrong;
      read[map] += bytes.size();
      return Status::Ok();
    });
    ASSERT_TRUE(all.ok()) << "partition " << partition << ": " << all.ToString();
    EXPECT_EQ(wrong, 0u) << "partition " << partition;
    for (uint32_t map = 0; map < maps; ++map) {
      EXPECT_EQ(read[map], per_stream) << "map " << map << " partition " << partition;
    }
  }
#ifndef BM_SANITIZER_BUILD  // (the sanitizers' own memory is no measure of the worker's)
  // The worker never held more than its --memory, though it took in 32x its shuffle memory.
  const uint64_t peak_kib = ProcStatusKiB(cluster.worker_process("w1").pid(), "VmHWM");
  EXPECT_GT(peak_kib, 0u);
  EXPECT_LE(peak_kib, uint64_t{256} << 10)
      << "the worker's resident memory peaked at " << peak_kib / 1024 << " MiB";
#endif
}

// What a reader on the workers' host has been served, from w1's /metrics: pages through the
// local-read socket by where their bytes were, and readShuffle requests answered over TCP.
struct ServedShufflePages {
  uint64_t trailer = 0;
  uint64_t region = 0;
  uint64_t file = 0;
  uint64_t tcp = 0;
  uint64_t local() const { return trailer + region + file; }
};
ServedShufflePages ServedBy(LocalCluster& cluster, const std::string& worker) {
  auto local = [&](const std::string& bytes) {
    return WorkerMetric(cluster, worker,
                        "blockmgr_worker_shuffle_local_pages_total{bytes=\"" + bytes + "\"}")
        .value_or(0);
  };
  return {.trailer = local("trailer"),
          .region = local("region"),
          .file = local("file"),
          .tcp = WorkerMetric(cluster, worker,
                              "blockmgr_worker_requests_total{op=\"shuffle_read\",result=\"ok\"}")
                     .value_or(0)};
}

// Every way a page's bytes take through the socket: pieces in memory, a page's worth in a sealed
// region or a small partition's in the reply's trailer, and pieces let go from memory to their
// partition file (the file's descriptor, mapped). Nothing is read over TCP.
TEST(ShuffleTest, ReaderOnTheWorkersHostReadsThroughTheLocalSocket) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {.id = "w1", .extra_args = {"--http", "127.0.0.1:0", "--shuffle-memory", "2MiB"}}));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 61, .maps = 4, .partitions = 2};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  // 1.5 MiB per map and partition in pieces of 192 KiB: 9 MiB through 2 MiB of shuffle memory,
  // so the first maps' pieces are in their files only when read; then a map of 4 KiB pieces.
  auto size_of = [](uint32_t map) -> size_t { return map < 3 ? 1536 << 10 : 20000; };
  for (uint32_t map = 0; map < spec.maps; ++map) {
    const ShuffleWriterOptions options{.max_piece_bytes = map < 3 ? 192u << 10 : 4096u,
                                       .batch_bytes = 256 << 10};
    Status ran = RunMap(client, spec, map, 0, size_of(map), true, options);
    ASSERT_TRUE(ran.ok()) << "map " << map << ": " << ran.ToString();
  }
  for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
    Result<std::map<uint32_t, std::string>> read = ReadPartition(client, spec.id, partition);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    ASSERT_EQ(read->size(), spec.maps);
    for (uint32_t map = 0; map < spec.maps; ++map) {
      EXPECT_TRUE(read->at(map) == OutputOf(map, partition, 0, size_of(map)))
          << "map " << map << " partition " << partition;
    }
  }
  ServedShufflePages served = ServedBy(cluster, "w1");
  EXPECT_GT(served.region, 0u);
  EXPECT_GT(served.file, 0u);
  // A partition whose pieces fit one packet comes in the trailer.
  const ShuffleSpec small{.id = 64, .maps = 1, .partitions = 1};
  ASSERT_TRUE(client.RegisterShuffle(small).ok());
  const ShuffleWriterOptions small_pieces{.max_piece_bytes = 4096, .batch_bytes = 64 << 10};
  ASSERT_TRUE(RunMap(client, small, 0, 0, 20000, true, small_pieces).ok());
  Result<std::map<uint32_t, std::string>> read = ReadPartition(client, small.id, 0);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_TRUE(read->at(0) == OutputOf(0, 0, 0, 20000));
  served = ServedBy(cluster, "w1");
  EXPECT_GT(served.trailer, 0u);
  EXPECT_EQ(served.tcp, 0u);
}

// The same partitions over TCP where the local path is off: on the client's side, or on the
// worker's (--no-local-reads: it offers no socket).
TEST(ShuffleTest, AReaderReadsOverTcpWhereLocalReadsAreOff) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {.id = "w1", .extra_args = {"--http", "127.0.0.1:0", "--no-local-reads"}}));
  ASSERT_NO_FATAL_FAILURE(
      cluster.StartWorker({.id = "w2", .extra_args = {"--http", "127.0.0.1:0"}}));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 62, .maps = 3, .partitions = 6};
  Result<ShuffleLayout> layout = client.RegisterShuffle(spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (uint32_t map = 0; map < spec.maps; ++map) {
    ASSERT_TRUE(RunMap(client, spec, map, 0, 100000).ok());
  }
  auto read_everything = [&](Client& reader) {
    for (uint32_t partition = 0; partition < spec.partitions; ++partition) {
      Result<std::map<uint32_t, std::string>> read = ReadPartition(reader, spec.id, partition);
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      for (uint32_t map = 0; map < spec.maps; ++map) {
        EXPECT_TRUE(read->at(map) == OutputOf(map, partition, 0, 100000)) << map;
      }
    }
  };
  ASSERT_NO_FATAL_FAILURE(read_everything(client));
  const ServedShufflePages w1 = ServedBy(cluster, "w1");
  const ServedShufflePages w2 = ServedBy(cluster, "w2");
  EXPECT_EQ(w1.local(), 0u);
  EXPECT_GT(w1.tcp, 0u);
  EXPECT_GT(w2.local(), 0u);
  EXPECT_EQ(w2.tcp, 0u);

  Client over_tcp(ClientFor(cluster, /*local_reads=*/false));
  ASSERT_NO_FATAL_FAILURE(read_everything(over_tcp));
  EXPECT_EQ(ServedBy(cluster, "w2").local(), w2.local());
  EXPECT_GT(ServedBy(cluster, "w2").tcp, 0u);
}

// A reader holds a page mapped from a partition file while the shuffle is removed and its files
// unlinked: its bytes stay as they were, the read then fails cleanly, and the worker serves on.
TEST(ShuffleTest, AShuffleRemovedWhileItsReaderHoldsAMappingCrashesNothing) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(
      {.id = "w1", .extra_args = {"--http", "127.0.0.1:0", "--shuffle-memory", "1MiB"}}));
  Client client(ClientFor(cluster));
  const ShuffleSpec spec{.id = 63, .maps = 1, .partitions = 1};
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  const size_t size = 12 << 20;  // through 1 MiB of memory: its start is in the file only
  const ShuffleWriterOptions options{.max_piece_bytes = 64 << 10, .batch_bytes = 256 << 10};
  ASSERT_TRUE(RunMap(client, spec, 0, 0, size, true, options).ok());
  const std::string expected = OutputOf(0, 0, 0, size);
  const std::filesystem::path dir =
      std::filesystem::path(cluster.worker_disk_dir("w1")) / "shuffle" / "63";
  ASSERT_TRUE(std::filesystem::exists(dir));

  Result<std::unique_ptr<ShuffleReader>> reader = client.OpenShuffleReader(spec.id, 0);
  ASSERT_TRUE(reader.ok());
  std::span<const std::byte> held;  // the first piece, in the mapping of the first page
  bool removed = false;
  size_t visited = 0;
  Status read = (*reader)->ForEach([&](uint32_t, std::span<const std::byte> bytes) {
    if (held.empty()) {
      held = bytes;
      EXPECT_TRUE(client.UnregisterShuffle(spec.id).ok());
      removed = WaitFor([&] { return !std::filesystem::exists(dir); }, 20s);
      // Unlinked, and still mapped: the same bytes.
      EXPECT_TRUE(Text(held) == expected.substr(0, held.size()));
    }
    EXPECT_TRUE(Text(bytes) == expected.substr(visited, bytes.size())) << "at " << visited;
    visited += bytes.size();
    return Status::Ok();
  });
  EXPECT_TRUE(removed) << dir << " is still there";
  EXPECT_FALSE(read.ok()) << "read " << visited << " bytes of a removed shuffle";
  EXPECT_GT(visited, 0u);
  EXPECT_LT(visited, size);
  EXPECT_GT(ServedBy(cluster, "w1").file, 0u);
  // The worker serves on: the shuffle again, written and read whole.
  ASSERT_TRUE(client.RegisterShuffle(spec).ok());
  ASSERT_TRUE(RunMap(client, spec, 0, 1, 100000).ok());
  Result<std::map<uint32_t, std::string>> again = ReadPartition(client, spec.id, 0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->at(0) == OutputOf(0, 0, 1, 100000));
}

}  // namespace
}  // namespace bm::testing
