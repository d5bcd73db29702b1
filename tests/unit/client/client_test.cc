// Client against in-process fake servers (ROUTER sockets on inproc:// endpoints), to check the
// protocol side of puts and gets: pieces, ranges, generations, fail-over. Real processes are
// exercised by the integration tests.
#include "blockmgr/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/fake_server.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

struct FakeWorkerSpec {
  std::string id;
  std::string address;
  uint64_t memory_capacity = kGiB;
  uint64_t memory_used = 0;
};

// The master: lists `workers` and answers locations from `locations` (by block id text).
FakeServer::Handler MasterHandler(std::vector<FakeWorkerSpec> workers,
                                  std::map<std::string, std::vector<FakeWorkerSpec>> locations,
                                  uint64_t block_size) {
  return [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>&) {
    proto::Request::Reader request = in.request();
    if (request.isListWorkers()) {
      auto list = reply.initWorkers(workers.size());
      for (size_t i = 0; i < workers.size(); ++i) {
        list[i].setWorkerId(workers[i].id);
        list[i].setAddress(workers[i].address);
        list[i].initStats().setMemoryCapacity(workers[i].memory_capacity);
        list[i].getStats().setMemoryUsed(workers[i].memory_used);
      }
    } else if (request.isGetLocations()) {
      auto ids = request.getGetLocations().getBlockIds();
      auto list = reply.initLocations(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        list[i].setBlockId(ids[i]);
        auto found = locations.find(std::string(ids[i].cStr()));
        if (found == locations.end()) continue;
        auto out = list[i].initLocations(found->second.size());
        for (size_t j = 0; j < found->second.size(); ++j) {
          out[j].setWorkerId(found->second[j].id);
          out[j].setAddress(found->second[j].address);
          out[j].setSize(block_size);
        }
      }
    } else {
      SetError(reply, StatusCode::kInvalidArgument, "unexpected request");
    }
  };
}

// Serves `data` in ranges of at most kMaxPieceBytes; `generation(call)` gives each reply's
// generation, `fail(call)` may turn a call into an error.
FakeServer::Handler BlockHandler(std::vector<std::byte> data,
                                 std::function<uint64_t(int)> generation,
                                 std::function<std::optional<Status>(int)> fail = nullptr) {
  auto calls = std::make_shared<int>(0);
  return
      [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>& payload) {
        const int call = (*calls)++;
        if (fail) {
          if (std::optional<Status> error = fail(call)) {
            bm::SetError(reply.initError(), *error);
            return;
          }
        }
        proto::GetBlock::Reader get = in.request().getGetBlock();
        const uint64_t offset = get.getOffset();
        const uint64_t length =
            std::min<uint64_t>({get.getMaxLength(), kMaxPieceBytes, data.size() - offset});
        proto::GetReply::Builder out = reply.initGet();
        out.setTotalSize(data.size());
        out.setOffset(offset);
        out.setLength(length);
        out.setGeneration(generation(call));
        for (uint64_t done = 0; done < length; done += kChunkBytes) {
          const uint64_t n = std::min<uint64_t>(kChunkBytes, length - done);
          payload.push_back(MessageFromChunk(MakeChunk(std::span(data).subspan(offset + done, n))));
        }
      };
}

class ClientTest : public ::testing::Test {
 protected:
  Client MakeClient(milliseconds timeout = milliseconds(2000)) {
    return Client(ClientOptions{"inproc://master", timeout}, context_);
  }

  zmq::context_t context_;
};

const FakeWorkerSpec kW1{"w1", "inproc://w1"};
const FakeWorkerSpec kW2{"w2", "inproc://w2"};

TEST_F(ClientTest, GetReadsABlockInRanges) {
  const std::vector<std::byte> data = Pattern(kMaxPieceBytes + 3 * kChunkBytes + 17);
  FakeServer master(context_, "inproc://master",
                    MasterHandler({kW1}, {{"rdd_1_0", {kW1}}}, data.size()));
  FakeServer w1(context_, "inproc://w1", BlockHandler(data, [](int) { return 7; }));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST_F(ClientTest, GetOfABlockWithNoLocationIsNotFound) {
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(9, 9));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got.status().message(), "block rdd_9_9 is not stored on any live worker");
}

TEST_F(ClientTest, GetStartsOverWhenTheBlockIsReplacedMidRead) {
  const std::vector<std::byte> data = Pattern(kMaxPieceBytes + 5);
  FakeServer master(context_, "inproc://master",
                    MasterHandler({kW1}, {{"rdd_1_0", {kW1}}}, data.size()));
  // The second reply comes from a new generation: the first range must be thrown away.
  FakeServer w1(context_, "inproc://w1",
                BlockHandler(data, [](int call) { return call < 1 ? 1 : 2; }));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST_F(ClientTest, GetGivesUpWithAbortedWhenTheBlockKeepsChanging) {
  const std::vector<std::byte> data = Pattern(kMaxPieceBytes + 5);
  FakeServer master(context_, "inproc://master",
                    MasterHandler({kW1}, {{"rdd_1_0", {kW1}}}, data.size()));
  FakeServer w1(context_, "inproc://w1", BlockHandler(data, [](int call) { return call; }));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kAborted);
}

TEST_F(ClientTest, GetFallsOverToTheNextLocation) {
  const std::vector<std::byte> data = Pattern(3 * kChunkBytes);
  FakeServer master(context_, "inproc://master",
                    MasterHandler({kW1, kW2}, {{"rdd_1_0", {kW1, kW2}}}, data.size()));
  FakeServer w1(context_, "inproc://w1",
                BlockHandler(
                    data, [](int) { return 1; },
                    [](int) -> std::optional<Status> {
                      return NotFoundError("block rdd_1_0 is not stored here");
                    }));
  FakeServer w2(context_, "inproc://w2", BlockHandler(data, [](int) { return 1; }));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST_F(ClientTest, GetToCannotFallOverOnceBytesReachedTheSink) {
  const std::vector<std::byte> data = Pattern(kMaxPieceBytes + 5);
  FakeServer master(context_, "inproc://master",
                    MasterHandler({kW1, kW2}, {{"rdd_1_0", {kW1, kW2}}}, data.size()));
  FakeServer w1(context_, "inproc://w1",
                BlockHandler(
                    data, [](int) { return 1; },
                    [](int call) -> std::optional<Status> {
                      if (call == 0) return std::nullopt;
                      return UnavailableError("shutting down");
                    }));
  FakeServer w2(context_, "inproc://w2", BlockHandler(data, [](int) { return 1; }));
  Client client = MakeClient();
  uint64_t received = 0;
  Result<uint64_t> got = client.GetTo(BlockId::Rdd(1, 0), [&](std::span<const std::byte> b) {
    received += b.size();
    return Status::Ok();
  });
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(received, kMaxPieceBytes);
}

TEST_F(ClientTest, MasterThatDoesNotAnswerIsUnavailable) {
  Client client = MakeClient(milliseconds(100));
  Result<std::vector<WorkerInfo>> workers = client.Workers();
  ASSERT_FALSE(workers.ok());
  EXPECT_EQ(workers.status().code(), StatusCode::kUnavailable);
}

TEST_F(ClientTest, BadMasterAddressIsAnErrorNotAnException) {
  Client client(ClientOptions{"not-an-endpoint", milliseconds(100)}, context_);
  EXPECT_EQ(client.Workers().status().code(), StatusCode::kInvalidArgument);
}

// Records the pieces of uploads; answers outOfSpace when `full`.
struct UploadLog {
  struct Piece {
    uint64_t offset, total, upload_id;
    bool last;
    std::vector<size_t> frames;
  };
  std::mutex mu;
  std::vector<Piece> pieces;
  std::vector<std::byte> bytes;
};

FakeServer::Handler PutHandler(UploadLog* log, bool full) {
  return [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>&) {
    if (full) {
      SetError(reply, StatusCode::kOutOfSpace, "no room");
      return;
    }
    proto::PutBlock::Reader put = in.request().getPutBlock();
    std::lock_guard<std::mutex> lock(log->mu);
    UploadLog::Piece piece{
        put.getOffset(), put.getTotalSize(), put.getUploadId(), put.getLast(), {}};
    for (zmq::message_t& frame : in.payload()) {
      piece.frames.push_back(frame.size());
      auto* p = static_cast<const std::byte*>(frame.data());
      log->bytes.insert(log->bytes.end(), p, p + frame.size());
    }
    log->pieces.push_back(piece);
    proto::PutReply::Builder out = reply.initPut();
    out.setCommitted(put.getLast());
    out.setTier(proto::Tier::DISK);
  };
}

TEST_F(ClientTest, PutStreamsUnitAlignedPiecesOfAtMost16MiBInFramesOf1MiB) {
  const std::vector<std::byte> data = Pattern(2 * kMaxPieceBytes + kChunkBytes / 2, 3);
  UploadLog log;
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  FakeServer w1(context_, "inproc://w1", PutHandler(&log, false));
  Client client = MakeClient();
  Result<PutResult> put = client.Put(BlockId::Rdd(2, 0), data, StorageLevel::kDiskOnly);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w1");
  EXPECT_EQ(put->tier, Tier::kDisk);
  EXPECT_EQ(put->size, data.size());
  std::lock_guard<std::mutex> lock(log.mu);
  ASSERT_GE(log.pieces.size(), 3u);
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < log.pieces.size(); ++i) {
    const UploadLog::Piece& piece = log.pieces[i];
    EXPECT_EQ(piece.offset, expected_offset);
    EXPECT_EQ(piece.total, data.size());
    EXPECT_EQ(piece.upload_id, log.pieces[0].upload_id);
    EXPECT_EQ(piece.last, i + 1 == log.pieces.size());
    uint64_t bytes = 0;
    for (size_t frame : piece.frames) {
      EXPECT_LE(frame, kChunkBytes);
      bytes += frame;
    }
    EXPECT_LE(bytes, kMaxPieceBytes);
    // Whole digest units, so the worker checks and keeps the units' digests as they came.
    if (!piece.last) {
      EXPECT_EQ(bytes % kDigestUnitBytes, 0u);
    }
    expected_offset += bytes;
  }
  EXPECT_TRUE(log.bytes == data);
}

TEST_F(ClientTest, PutOfAnEmptyBlockIsOneLastPieceWithoutPayload) {
  UploadLog log;
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  FakeServer w1(context_, "inproc://w1", PutHandler(&log, false));
  Client client = MakeClient();
  ASSERT_TRUE(client.Put(BlockId::Broadcast(1), {}, StorageLevel::kMemoryOnly).ok());
  std::lock_guard<std::mutex> lock(log.mu);
  ASSERT_EQ(log.pieces.size(), 1u);
  EXPECT_TRUE(log.pieces[0].last);
  EXPECT_TRUE(log.pieces[0].frames.empty());
}

TEST_F(ClientTest, PutSkipsAWorkerThatTurnsOutToBeFull) {
  const std::vector<std::byte> data = Pattern(kChunkBytes);
  UploadLog full_log, log;
  // w1 looks emptier, so it is tried first.
  FakeWorkerSpec w1 = kW1, w2 = kW2;
  w2.memory_used = kMiB;
  FakeServer master(context_, "inproc://master", MasterHandler({w1, w2}, {}, 0));
  FakeServer s1(context_, "inproc://w1", PutHandler(&full_log, true));
  FakeServer s2(context_, "inproc://w2", PutHandler(&log, false));
  Client client = MakeClient();
  Result<PutResult> put = client.Put(BlockId::Rdd(2, 0), data, StorageLevel::kMemoryOnly);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w2");
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_TRUE(log.bytes == data);
}

TEST_F(ClientTest, PutStreamReadsAnIstream) {
  const std::vector<std::byte> data = Pattern(kMaxPieceBytes + 1, 5);
  std::string text(reinterpret_cast<const char*>(data.data()), data.size());
  std::istringstream in(text);
  UploadLog log;
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  FakeServer w1(context_, "inproc://w1", PutHandler(&log, false));
  Client client = MakeClient();
  ASSERT_TRUE(client.PutStream(BlockId::Rdd(3, 0), in, data.size(), StorageLevel::kDiskOnly).ok());
  std::lock_guard<std::mutex> lock(log.mu);
  EXPECT_TRUE(log.bytes == data);
}

TEST_F(ClientTest, PutStreamOfAShortSourceFails) {
  std::istringstream in("only this");
  UploadLog log;
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  FakeServer w1(context_, "inproc://w1", PutHandler(&log, false));
  Client client = MakeClient();
  Result<PutResult> put = client.PutStream(BlockId::Rdd(3, 0), in, 100, StorageLevel::kDiskOnly);
  EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, PutToAWorkerTheMasterDoesNotListIsNotFound) {
  FakeServer master(context_, "inproc://master", MasterHandler({kW1}, {}, 0));
  Client client = MakeClient();
  Result<PutResult> put =
      client.Put(BlockId::Rdd(2, 0), {}, StorageLevel::kMemoryOnly, PutOptions{"w9"});
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(put.status().message(), "no live worker named w9");
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

std::vector<uint64_t> UnitDigests(const std::vector<std::byte>& data) {
  std::vector<uint64_t> units;
  for (size_t pos = 0; pos < data.size(); pos += kDigestUnitBytes) {
    units.push_back(
        DigestOf(std::span(data).subspan(pos, std::min(kDigestUnitBytes, data.size() - pos))));
  }
  return units;
}

// A worker serving `data` whole-range with the digests of its units, counting the
// verifyBlock{reportedBad} requests it gets and always finding its copy intact. `digests_of`,
// when given, are the bytes the digests it sends are taken from (a link that damages every
// reply).
FakeServer::Handler DigestedBlockHandler(
    std::vector<std::byte> data, std::shared_ptr<std::atomic<int>> reported_bad,
    const std::optional<std::vector<std::byte>>& digests_of = std::nullopt) {
  const std::vector<uint64_t> units = UnitDigests(digests_of ? *digests_of : data);
  return
      [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>& payload) {
        if (in.request().isVerifyBlock()) {
          if (in.request().getVerifyBlock().getReportedBad()) ++*reported_bad;
          reply.initVerified().setState(proto::VerifyReply::State::INTACT);
          return;
        }
        proto::GetBlock::Reader get = in.request().getGetBlock();
        const uint64_t offset = get.getOffset();
        const uint64_t length =
            std::min<uint64_t>({get.getMaxLength(), kMaxPieceBytes, data.size() - offset});
        proto::GetReply::Builder out = reply.initGet();
        out.setTotalSize(data.size());
        out.setOffset(offset);
        out.setLength(length);
        out.setGeneration(1);
        const uint64_t first = offset / kDigestUnitBytes;
        const uint64_t last = length == 0 ? first : (offset + length - 1) / kDigestUnitBytes;
        auto digests = out.initUnitDigests(static_cast<unsigned>(last - first + 1));
        for (uint64_t u = first; u <= last; ++u)
          digests.set(static_cast<unsigned>(u - first), units[u]);
        for (uint64_t done = 0; done < length; done += kChunkBytes) {
          const uint64_t n = std::min<uint64_t>(kChunkBytes, length - done);
          payload.push_back(MessageFromChunk(MakeChunk(std::span(data).subspan(offset + done, n))));
        }
      };
}

TEST_F(ClientTest, ACopyWhoseUnitDigestsDoNotMakeTheMastersBlockDigestIsReadElsewhere) {
  const std::vector<std::byte> data = Pattern(2 * kDigestUnitBytes + 100);
  // w1 holds other bytes with digests of its own that match them: every unit check passes,
  // only the master's block digest tells.
  const std::vector<std::byte> other = Pattern(data.size(), 7);
  const uint64_t digest = BlockDigestOf(UnitDigests(data));
  FakeServer master(
      context_, "inproc://master",
      [&](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>&) {
        auto ids = in.request().getGetLocations().getBlockIds();
        auto list = reply.initLocations(ids.size());
        list[0].setBlockId(ids[0]);
        list[0].setDigest(digest);
        auto out = list[0].initLocations(2);
        out[0].setWorkerId("w1");
        out[0].setAddress("inproc://w1");
        out[0].setSize(data.size());
        out[1].setWorkerId("w2");
        out[1].setAddress("inproc://w2");
        out[1].setSize(data.size());
      });
  auto bad_on_w1 = std::make_shared<std::atomic<int>>(0);
  auto bad_on_w2 = std::make_shared<std::atomic<int>>(0);
  FakeServer w1(context_, "inproc://w1", DigestedBlockHandler(other, bad_on_w1));
  FakeServer w2(context_, "inproc://w2", DigestedBlockHandler(data, bad_on_w2));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(bad_on_w1->load(), 1);
  EXPECT_EQ(bad_on_w2->load(), 0);
}

// Issue 32, item 2: a copy whose bytes arrive damaged on every read while its worker finds it
// intact is read again a bounded number of times, then the get fails as a network problem
// naming the worker, not as data loss.
TEST_F(ClientTest, ACopyCorruptedInTransitOnEveryReadIsANetworkProblemNotDataLoss) {
  const std::vector<std::byte> data = Pattern(2 * kDigestUnitBytes + 100);
  std::vector<std::byte> damaged = data;
  damaged[kDigestUnitBytes + 3] ^= std::byte{0x10};
  FakeServer master(
      context_, "inproc://master",
      [&](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>&) {
        auto ids = in.request().getGetLocations().getBlockIds();
        auto list = reply.initLocations(ids.size());
        list[0].setBlockId(ids[0]);
        auto out = list[0].initLocations(1);
        out[0].setWorkerId("w1");
        out[0].setAddress("inproc://w1");
        out[0].setSize(data.size());
      });
  auto reported_bad = std::make_shared<std::atomic<int>>(0);
  FakeServer w1(context_, "inproc://w1", DigestedBlockHandler(damaged, reported_bad, data));
  Client client = MakeClient();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_NE(got.status().message().find("corrupted in transit from w1"), std::string::npos)
      << got.status().ToString();
  EXPECT_EQ(reported_bad->load(), 3);  // read three times, each told to the worker
}

}  // namespace
}  // namespace bm
