#include "worker/worker_server.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/request_kinds.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/fake_master.h"
#include "tests/unit/worker/fault_injecting_store.h"
#include "worker/disk/disk_store.h"
#include "worker/memory_store.h"
#include "worker/worker_request_kinds.h"

namespace bm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kAwait = seconds(10);

using testing::FakeMaster;
using testing::SeenRequest;

std::vector<std::byte> RandomBytes(size_t size, uint64_t seed) {
  return testing::RandomByteVector(size, seed);
}

// Payload frames of at most kChunkBytes holding a copy of `bytes`.
std::vector<zmq::message_t> Frames(std::span<const std::byte> bytes) {
  std::vector<zmq::message_t> frames;
  for (size_t pos = 0; pos < bytes.size(); pos += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes.size() - pos);
    frames.emplace_back(bytes.data() + pos, n);
  }
  return frames;
}

void FillPut(capnp::MallocMessageBuilder& builder, const std::string& block, StorageLevel level,
             uint64_t total, uint64_t offset, bool last, uint64_t upload_id) {
  proto::PutBlock::Builder put = builder.initRoot<proto::Request>().initPutBlock();
  put.setBlockId(block);
  put.setLevel(ToProto(level));
  put.setTotalSize(total);
  put.setOffset(offset);
  put.setLast(last);
  put.setUploadId(upload_id);
}

// Uploads `data` in pieces of `piece` bytes; returns the reply to the last piece.
Result<IncomingMessage> Put(RpcChannel& channel, const std::string& block, StorageLevel level,
                            std::span<const std::byte> data, uint64_t piece = kMaxPieceBytes,
                            uint64_t upload_id = 1) {
  uint64_t offset = 0;
  while (true) {
    const uint64_t n = std::min<uint64_t>(piece, data.size() - offset);
    const bool last = offset + n == data.size();
    capnp::MallocMessageBuilder request;
    FillPut(request, block, level, data.size(), offset, last, upload_id);
    Result<IncomingMessage> reply = channel.Call(request, Frames(data.subspan(offset, n)));
    if (!reply.ok() || last) return reply;
    if (reply->reply().getPut().getCommitted()) return InternalError("committed before the end");
    offset += n;
  }
}

struct GetResult {
  uint64_t total_size, offset, length, generation;
  proto::Tier tier;
  std::vector<std::byte> bytes;
  std::vector<uint64_t> unit_digests{};
};

Result<GetResult> Get(RpcChannel& channel, const std::string& block, uint64_t offset,
                      uint64_t max_length) {
  capnp::MallocMessageBuilder request;
  proto::GetBlock::Builder get = request.initRoot<proto::Request>().initGetBlock();
  get.setBlockId(block);
  get.setOffset(offset);
  get.setMaxLength(max_length);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(request));
  proto::GetReply::Reader header = reply.reply().getGet();
  GetResult out{header.getTotalSize(),  header.getOffset(), header.getLength(),
                header.getGeneration(), header.getTier(),   {}};
  for (uint64_t digest : header.getUnitDigests()) out.unit_digests.push_back(digest);
  for (const zmq::message_t& frame : reply.payload()) {
    const auto* p = static_cast<const std::byte*>(frame.data());
    out.bytes.insert(out.bytes.end(), p, p + frame.size());
  }
  return out;
}

Result<uint64_t> Remove(RpcChannel& channel, const std::vector<std::string>& blocks) {
  capnp::MallocMessageBuilder request;
  auto ids = request.initRoot<proto::Request>().initRemoveBlocks().initBlockIds(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) ids.set(i, blocks[i]);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(request));
  return reply.reply().getRemoved();
}

Result<bool> Contains(RpcChannel& channel, const std::string& block) {
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().initContainsBlock().setBlockId(block);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(request));
  return reply.reply().getContains().getPresent();
}

struct VerifyResult {
  proto::VerifyReply::State state;
  proto::Tier tier;
  bool digested;
  std::string message;
};

Result<VerifyResult> Verify(RpcChannel& channel, const std::string& block, bool reported_bad) {
  capnp::MallocMessageBuilder request;
  proto::VerifyBlock::Builder verify = request.initRoot<proto::Request>().initVerifyBlock();
  verify.setBlockId(block);
  verify.setReportedBad(reported_bad);
  BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(request));
  proto::VerifyReply::Reader verified = reply.reply().getVerified();
  return VerifyResult{verified.getState(), verified.getTier(), verified.getDigested(),
                      verified.getMessage()};
}

Status Ping(RpcChannel& channel) {
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().setPing();
  return channel.Call(request).status();
}

// A DEALER that sends arbitrary frames and reads whatever comes back.
class RawPeer {
 public:
  RawPeer(zmq::context_t& context, const std::string& address)
      : socket_(context, zmq::socket_type::dealer) {
    ConfigureSocket(socket_);
    socket_.connect(address);
  }
  void SendFrames(std::vector<zmq::message_t> frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      ASSERT_TRUE(socket_.send(frames[i], flags));
    }
  }
  void Send(capnp::MallocMessageBuilder& header, std::vector<zmq::message_t> payload = {}) {
    ASSERT_TRUE(SendMessage(socket_, nullptr, header, std::move(payload)).ok());
  }
  // The next reply, or nullopt after `timeout`.
  std::optional<IncomingMessage> Receive(milliseconds timeout = kAwait) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, timeout);
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    Result<IncomingMessage> received = ReceiveMessage(socket_, false);
    if (!received.ok()) return std::nullopt;
    return std::move(received).value();
  }
  // The error code of the next reply, which must be an error.
  std::pair<uint64_t, proto::ErrorCode> ReceiveError() {
    std::optional<IncomingMessage> reply = Receive();
    if (!reply) {
      ADD_FAILURE() << "no reply";
      return {~0ull, proto::ErrorCode::INTERNAL};
    }
    if (!reply->reply().isError()) {
      ADD_FAILURE() << "not an error reply";
      return {~0ull, proto::ErrorCode::INTERNAL};
    }
    return {reply->reply().getId(), reply->reply().getError().getCode()};
  }

 private:
  zmq::socket_t socket_;
};

class WorkerServerTest : public ::testing::Test {
 protected:
  void SetUp() override { master_ = std::make_unique<FakeMaster>(context_); }
  void TearDown() override { StopWorker(); }

  void StartWorker() {
    Result<std::unique_ptr<DiskStore>> disk = DiskStore::Open(dir_.Sub("disk"), 0);
    ASSERT_TRUE(disk.ok()) << disk.status().ToString();
    auto faults = std::make_unique<testing::FaultInjectingStore>(std::move(disk).value());
    faults_ = faults.get();
    auto blocks = std::make_unique<BlockManager>(std::make_unique<MemoryStore>(memory_bytes_),
                                                 std::move(faults));
    options_.listen_address = "tcp://127.0.0.1:*";
    options_.master.master_address = master_->endpoint();
    Result<std::unique_ptr<WorkerServer>> server =
        WorkerServer::Create(context_, options_, std::move(blocks), clock_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    thread_ = std::thread([this] {
      if (on_loop_thread_) on_loop_thread_();
      server_->Run();
    });
    channel_ = std::make_unique<RpcChannel>(context_, server_->endpoint(), seconds(10));
  }

  void StopWorker() {
    if (!server_) return;
    faults_->ClearFaults();  // a held write would hold the storage thread's shutdown
    server_->Stop();
    thread_.join();
    channel_.reset();
    faults_ = nullptr;
    server_.reset();
  }

  bool AwaitRegistration() {
    return master_->WaitFor([](const std::vector<SeenRequest>& seen) {
      return std::any_of(seen.begin(), seen.end(),
                         [](const SeenRequest& r) { return r.kind == SeenRequest::kRegister; });
    });
  }

  zmq::context_t context_;
  testing::TempDir dir_;
  SteadyClock clock_;
  uint64_t memory_bytes_ = 64 * kMiB;
  WorkerServerOptions options_;
  std::unique_ptr<FakeMaster> master_;
  std::unique_ptr<WorkerServer> server_;
  // The worker's disk store, owned by its block manager; set while the worker runs.
  testing::FaultInjectingStore* faults_ = nullptr;
  std::thread thread_;
  std::function<void()> on_loop_thread_;  // runs on the loop's thread before Run()
  std::unique_ptr<RpcChannel> channel_;
};

// The same-host read socket is the owner's only, read and write (docs/storage.md "Same-host
// reads").
TEST_F(WorkerServerTest, TheLocalReadSocketIsCreatedOwnerReadWriteOnly) {
  options_.local_socket_path = dir_.Sub("local.sock");
  ASSERT_NO_FATAL_FAILURE(StartWorker());
  struct stat socket_file {};
  ASSERT_EQ(lstat(options_.local_socket_path.c_str(), &socket_file), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISSOCK(socket_file.st_mode));
  EXPECT_EQ(socket_file.st_mode & 07777, 0600u);
}

TEST_F(WorkerServerTest, RegistersWithMasterAndSendsHeartbeats) {
  StartWorker();
  ASSERT_TRUE(master_->WaitFor([&](const std::vector<SeenRequest>& seen) {
    return !seen.empty() && seen.front().kind == SeenRequest::kRegister &&
           std::count_if(seen.begin(), seen.end(), [](const SeenRequest& r) {
             return r.kind == SeenRequest::kHeartbeat;
           }) >= 2;
  }));
  master_->WaitFor([&](const std::vector<SeenRequest>& seen) {
    const SeenRequest& reg = seen.front();
    EXPECT_EQ(reg.worker_id, server_->worker_id());
    EXPECT_EQ(reg.address, server_->endpoint());
    EXPECT_TRUE(reg.blocks.empty());
    return true;
  });
  EXPECT_EQ(server_->worker_id().rfind("worker-127.0.0.1-", 0), 0u) << server_->worker_id();
  EXPECT_TRUE(Ping(*channel_).ok());
}

TEST_F(WorkerServerTest, RegistrationCarriesFullReportOfBlocksAlreadyOnDisk) {
  StartWorker();
  std::vector<std::byte> data = RandomBytes(3 * kMiB + 5, 1);
  ASSERT_TRUE(Put(*channel_, "rdd_3_1", StorageLevel::kDiskOnly, data).ok());
  StopWorker();

  master_ = std::make_unique<FakeMaster>(context_);
  StartWorker();
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return !seen.empty() && seen.front().kind == SeenRequest::kRegister &&
           seen.front().Has("rdd_3_1");
  }));
  Result<GetResult> got = Get(*channel_, "rdd_3_1", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, data);
}

TEST_F(WorkerServerTest, FullReportBiggerThanOneBatchFollowsRegistrationInReports) {
  options_.master.max_updates_per_report = 2;
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());
  for (int p = 0; p < 5; ++p) {
    ASSERT_TRUE(
        Put(*channel_, "rdd_4_" + std::to_string(p), StorageLevel::kMemoryOnly, RandomBytes(10, p))
            .ok());
  }
  master_->ForgetWorkers();
  // The re-registration carries two blocks; the other three follow as reports, and together
  // they name every block.
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    auto last_register = std::find_if(seen.rbegin(), seen.rend(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kRegister && !r.blocks.empty();
    });
    if (last_register == seen.rend()) return false;
    std::set<std::string> named;
    for (auto it = last_register.base() - 1; it != seen.end(); ++it) {
      if (it->kind == SeenRequest::kRegister || it->kind == SeenRequest::kReport) {
        for (const auto& [block, removed] : it->blocks) {
          if (!removed) named.insert(block);
        }
      }
    }
    return last_register->blocks.size() == 2 && named.size() == 5;
  }));
}

TEST_F(WorkerServerTest, MultiPiecePutThenRangedGetsAreByteExact) {
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());
  const std::vector<std::byte> data = RandomBytes(40 * kMiB + 123, 2);
  Result<IncomingMessage> put = Put(*channel_, "rdd_1_0", StorageLevel::kMemoryAndDisk, data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(put->reply().getPut().getCommitted());
  EXPECT_EQ(put->reply().getPut().getTier(), proto::Tier::MEMORY);

  // The whole block in replies of at most kMaxPieceBytes, one generation throughout.
  std::vector<std::byte> read;
  std::optional<uint64_t> generation;
  while (read.size() < data.size()) {
    Result<GetResult> got = Get(*channel_, "rdd_1_0", read.size(), 1ull << 40);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->total_size, data.size());
    EXPECT_EQ(got->offset, read.size());
    EXPECT_LE(got->length, kMaxPieceBytes);
    ASSERT_GT(got->length, 0u);
    ASSERT_EQ(got->bytes.size(), got->length);
    if (generation) {
      EXPECT_EQ(*generation, got->generation);
    }
    generation = got->generation;
    read.insert(read.end(), got->bytes.begin(), got->bytes.end());
  }
  EXPECT_TRUE(read == data);

  Result<GetResult> middle = Get(*channel_, "rdd_1_0", 5 * kMiB + 3, 1000);
  ASSERT_TRUE(middle.ok());
  EXPECT_TRUE(std::equal(middle->bytes.begin(), middle->bytes.end(), data.begin() + 5 * kMiB + 3,
                         data.begin() + 5 * kMiB + 1003));
  EXPECT_EQ(middle->length, 1000u);

  Result<GetResult> end = Get(*channel_, "rdd_1_0", data.size(), 1000);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->length, 0u);
  EXPECT_EQ(Get(*channel_, "rdd_1_0", data.size() + 1, 1000).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Get(*channel_, "rdd_1_1", 0, 1000).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(*channel_, "rdd_1_0").value());
  EXPECT_FALSE(Contains(*channel_, "rdd_1_1").value());
}

TEST_F(WorkerServerTest, DiskOnlyPutLandsOnDiskAndReadsBack) {
  StartWorker();
  const std::vector<std::byte> data = RandomBytes(5 * kMiB + 7, 3);
  Result<IncomingMessage> put =
      Put(*channel_, "broadcast_4", StorageLevel::kDiskOnly, data, 2 * kMiB + 1);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->reply().getPut().getTier(), proto::Tier::DISK);
  Result<GetResult> got = Get(*channel_, "broadcast_4", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->tier, proto::Tier::DISK);
  EXPECT_TRUE(got->bytes == data);
}

TEST_F(WorkerServerTest, EmptyBlockIsOnePieceWithNoPayload) {
  StartWorker();
  ASSERT_TRUE(Put(*channel_, "rdd_2_0", StorageLevel::kMemoryOnly, {}).ok());
  Result<GetResult> got = Get(*channel_, "rdd_2_0", 0, 100);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->total_size, 0u);
  EXPECT_TRUE(got->bytes.empty());
}

TEST_F(WorkerServerTest, GetBlocksPacksSmallBlocksAndReportsEachIdsState) {
  StartWorker();
  const std::vector<std::byte> small_a = RandomBytes(4096, 11);
  const std::vector<std::byte> small_b = RandomBytes(3000, 12);
  const std::vector<std::byte> big = RandomBytes(kMiB + 5, 13);
  ASSERT_TRUE(Put(*channel_, "rdd_7_0", StorageLevel::kMemoryOnly, small_a).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_7_1", StorageLevel::kDiskOnly, small_b).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_7_2", StorageLevel::kMemoryOnly, big).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_7_3", StorageLevel::kMemoryOnly, {}).ok());

  auto get_blocks = [&](const std::vector<std::string>& ids) {
    capnp::MallocMessageBuilder request;
    auto list = request.initRoot<proto::Request>().initGetBlocks().initBlockIds(
        static_cast<unsigned>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) list.set(static_cast<unsigned>(i), ids[i]);
    return channel_->Call(request);
  };
  Result<IncomingMessage> reply =
      get_blocks({"rdd_7_0", "rdd_7_9", "rdd_7_1", "rdd_7_2", "rdd_7_3", "rdd_7_0"});
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(reply->reply().isBlocksRead());
  auto entries = reply->reply().getBlocksRead();
  ASSERT_EQ(entries.size(), 6u);
  using State = proto::MultiGetEntry::State;
  EXPECT_EQ(entries[0].getState(), State::INCLUDED);
  EXPECT_EQ(entries[1].getState(), State::NOT_FOUND);
  EXPECT_EQ(entries[2].getState(), State::INCLUDED);
  EXPECT_EQ(entries[2].getTier(), proto::Tier::DISK);
  EXPECT_EQ(entries[3].getState(), State::INCLUDED);
  EXPECT_EQ(entries[3].getTotalSize(), big.size());
  EXPECT_EQ(entries[4].getState(), State::INCLUDED);
  EXPECT_EQ(entries[4].getTotalSize(), 0u);
  EXPECT_EQ(entries[5].getState(), State::INCLUDED);
  // The two small blocks share one frame; the big one is its two chunks; then the last small.
  std::vector<size_t> frame_sizes;
  std::vector<std::byte> payload;
  for (const zmq::message_t& frame : reply->payload()) {
    frame_sizes.push_back(frame.size());
    const auto* data = static_cast<const std::byte*>(frame.data());
    payload.insert(payload.end(), data, data + frame.size());
  }
  EXPECT_EQ(frame_sizes,
            (std::vector<size_t>{small_a.size() + small_b.size(), kMiB, 5, small_a.size()}));
  std::vector<std::byte> expected = small_a;
  expected.insert(expected.end(), small_b.begin(), small_b.end());
  expected.insert(expected.end(), big.begin(), big.end());
  expected.insert(expected.end(), small_a.begin(), small_a.end());
  EXPECT_TRUE(payload == expected);

  // Past the reply's 16 MiB a block is left for getBlock, and the rest still come.
  const std::vector<std::byte> large = RandomBytes(9 * kMiB, 14);
  ASSERT_TRUE(Put(*channel_, "rdd_8_0", StorageLevel::kMemoryOnly, large).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_8_1", StorageLevel::kMemoryOnly, large).ok());
  Result<IncomingMessage> capped = get_blocks({"rdd_8_0", "rdd_8_1", "rdd_7_0"});
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  auto capped_entries = capped->reply().getBlocksRead();
  EXPECT_EQ(capped_entries[0].getState(), State::INCLUDED);
  EXPECT_EQ(capped_entries[1].getState(), State::NOT_INCLUDED);
  EXPECT_EQ(capped_entries[1].getTotalSize(), large.size());
  EXPECT_EQ(capped_entries[2].getState(), State::INCLUDED);
  EXPECT_EQ(capped->payload_bytes(), large.size() + small_a.size());

  // A block uploaded in small pieces may be stored as many small chunks: the reply still stays
  // within the frame limit, leaving out what does not fit.
  const std::vector<std::byte> pieces = RandomBytes(200 * 1024, 15);
  ASSERT_TRUE(Put(*channel_, "rdd_9_0", StorageLevel::kMemoryOnly, pieces, 10 * 1024).ok());
  Result<IncomingMessage> chunky = get_blocks({"rdd_9_0", "rdd_9_0", "rdd_9_0", "rdd_9_0"});
  ASSERT_TRUE(chunky.ok()) << chunky.status().ToString();
  EXPECT_LE(chunky->payload().size(), kMaxPayloadFrames);
  uint64_t included = 0;
  for (proto::MultiGetEntry::Reader entry : chunky->reply().getBlocksRead()) {
    EXPECT_EQ(entry.getTotalSize(), pieces.size());
    if (entry.getState() == State::INCLUDED) ++included;
  }
  EXPECT_GE(included, 1u);
  EXPECT_EQ(chunky->payload_bytes(), included * pieces.size());

  // A malformed id fails the request; too many ids too; the worker keeps serving.
  EXPECT_EQ(get_blocks({"rdd_7_0", "not-a-block"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(get_blocks(std::vector<std::string>(kMaxGetBlocksIds + 1, "rdd_7_0")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(Ping(*channel_).ok());
}

TEST_F(WorkerServerTest, CommittedPutIsAnsweredOnlyAfterTheMasterAcksItsReport) {
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());
  master_->HoldReports(true);
  RawPeer client(context_, server_->endpoint());
  const std::vector<std::byte> data = RandomBytes(1000, 4);
  capnp::MallocMessageBuilder request;
  FillPut(request, "rdd_5_5", StorageLevel::kMemoryOnly, data.size(), 0, true, 7);
  request.getRoot<proto::Request>().setId(42);
  client.Send(request, Frames(data));

  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::any_of(seen.begin(), seen.end(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kReport && r.Has("rdd_5_5");
    });
  }));
  EXPECT_FALSE(client.Receive(milliseconds(0)).has_value()) << "answered before the ack";
  master_->ReleaseHeldReports();
  std::optional<IncomingMessage> reply = client.Receive();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->reply().getId(), 42u);
  ASSERT_TRUE(reply->reply().isPut());
  EXPECT_TRUE(reply->reply().getPut().getCommitted());
}

TEST_F(WorkerServerTest, PutIsAnsweredAfterAckTimeoutAndReportedWhenMasterReturns) {
  options_.put_ack_timeout = milliseconds(200);
  master_->SetSilent(true);
  StartWorker();
  const std::vector<std::byte> data = RandomBytes(4096, 5);
  const auto start = std::chrono::steady_clock::now();
  Result<IncomingMessage> put = Put(*channel_, "rdd_6_0", StorageLevel::kMemoryOnly, data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_TRUE(put->reply().getPut().getCommitted());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
  // Clients are served while the master is away.
  Result<GetResult> got = Get(*channel_, "rdd_6_0", 0, 1 << 20);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->bytes == data);

  master_->SetSilent(false);
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::any_of(seen.begin(), seen.end(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kRegister && r.Has("rdd_6_0");
    });
  }));
}

TEST_F(WorkerServerTest, UnknownWorkerReplyTriggersRegistrationWithFullBlockList) {
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());
  ASSERT_TRUE(Put(*channel_, "rdd_7_0", StorageLevel::kMemoryOnly, RandomBytes(100, 6)).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_7_1", StorageLevel::kDiskOnly, RandomBytes(200, 7)).ok());
  master_->ForgetWorkers();
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::count_if(seen.begin(), seen.end(), [](const SeenRequest& r) {
             return r.kind == SeenRequest::kRegister && r.Has("rdd_7_0") && r.Has("rdd_7_1");
           }) >= 1;
  }));
  // Registered again: heartbeats are accepted once more, and new changes are reported.
  ASSERT_TRUE(Put(*channel_, "rdd_7_2", StorageLevel::kMemoryOnly, RandomBytes(10, 8)).ok());
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::any_of(seen.begin(), seen.end(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kReport && r.Has("rdd_7_2");
    });
  }));
}

TEST_F(WorkerServerTest, RemoveBlocksCountsPresentBlocksAndReportsRemovals) {
  StartWorker();
  ASSERT_TRUE(Put(*channel_, "rdd_8_0", StorageLevel::kMemoryOnly, RandomBytes(100, 9)).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_8_1", StorageLevel::kDiskOnly, RandomBytes(100, 10)).ok());
  Result<uint64_t> removed = Remove(*channel_, {"rdd_8_0", "rdd_8_1", "rdd_9_9", "rdd_8_0"});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 2u);
  EXPECT_FALSE(Contains(*channel_, "rdd_8_0").value());
  EXPECT_FALSE(Contains(*channel_, "rdd_8_1").value());
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    bool a = false, b = false;
    for (const SeenRequest& r : seen) {
      if (r.kind != SeenRequest::kReport) continue;
      a = a || r.Has("rdd_8_0", true);
      b = b || r.Has("rdd_8_1", true);
    }
    return a && b;
  }));
  // A bad id anywhere in the list removes nothing.
  ASSERT_TRUE(Put(*channel_, "rdd_8_2", StorageLevel::kMemoryOnly, RandomBytes(10, 11)).ok());
  EXPECT_EQ(Remove(*channel_, {"rdd_8_2", "not-a-block"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(*channel_, "rdd_8_2").value());
}

// A get carries the stored digests of the units it returns; a copy whose stored bytes went bad
// (here its disk reads come back with a byte flipped) no longer matches them, and verifyBlock
// then drops it and reports the removal. An intact memory copy verifies as intact.
TEST_F(WorkerServerTest, VerifyBlockDropsACopyThatNoLongerMatchesItsDigests) {
  StartWorker();
  const std::vector<std::byte> on_disk = RandomBytes(2 * kMiB + 3, 12);
  ASSERT_TRUE(Put(*channel_, "rdd_8_0", StorageLevel::kDiskOnly, on_disk).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_8_1", StorageLevel::kMemoryOnly, RandomBytes(kMiB + 1, 13)).ok());
  for (const char* block : {"rdd_8_0", "rdd_8_1"}) {
    Result<VerifyResult> intact = Verify(*channel_, block, /*reported_bad=*/true);
    ASSERT_TRUE(intact.ok()) << intact.status().ToString();
    EXPECT_EQ(intact->state, proto::VerifyReply::State::INTACT) << block;
    EXPECT_TRUE(intact->digested) << block;
  }

  Result<GetResult> got = Get(*channel_, "rdd_8_0", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->unit_digests.size(), 3u);
  const std::vector<std::span<const std::byte>> pieces = {got->bytes};
  EXPECT_EQ(FirstBadUnit(pieces, 0, got->length, got->total_size, got->unit_digests), std::nullopt);
  faults_->CorruptReadsOf(BlockId::Rdd(8, 0));
  got = Get(*channel_, "rdd_8_0", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const std::vector<std::span<const std::byte>> bad_pieces = {got->bytes};
  EXPECT_EQ(FirstBadUnit(bad_pieces, 0, got->length, got->total_size, got->unit_digests), 0u);

  Result<VerifyResult> corrupt = Verify(*channel_, "rdd_8_0", /*reported_bad=*/true);
  ASSERT_TRUE(corrupt.ok()) << corrupt.status().ToString();
  EXPECT_EQ(corrupt->state, proto::VerifyReply::State::CORRUPT);
  EXPECT_EQ(corrupt->tier, proto::Tier::DISK);
  EXPECT_NE(corrupt->message.find("does not match its digest"), std::string::npos)
      << corrupt->message;
  EXPECT_FALSE(Contains(*channel_, "rdd_8_0").value());
  EXPECT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::any_of(seen.begin(), seen.end(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kReport && r.Has("rdd_8_0", /*removed=*/true);
    });
  }));
  Result<VerifyResult> gone = Verify(*channel_, "rdd_8_0", false);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  EXPECT_EQ(gone->state, proto::VerifyReply::State::NOT_FOUND);
}

// The kinds the tenant table (worker/worker_request_kinds.h) lets through as "not served" are
// really served by no handler: a kind served here cannot hide in that class from the gate.
TEST_F(WorkerServerTest, EveryKindTheTenantTableCallsNotServedIsAnsweredNotServed) {
  StartWorker();
  RawPeer peer(context_, server_->endpoint());
  for (const testing::RequestKind& kind : testing::AllRequestKinds()) {
    const WorkerRequestKind* entry = FindWorkerRequestKind(kind.which);
    ASSERT_NE(entry, nullptr) << kind.name;
    if (entry->gating != WorkerTenantGating::kNotServed) continue;
    capnp::MallocMessageBuilder request;
    testing::BuildRequestNaming(request, kind, BlockId::Rdd(1, 0));
    peer.Send(request);
    std::optional<IncomingMessage> reply = peer.Receive();
    ASSERT_TRUE(reply.has_value()) << kind.name;
    ASSERT_TRUE(reply->reply().isError()) << kind.name;
    EXPECT_NE(std::string(reply->reply().getError().getMessage().cStr()).find("not served"),
              std::string::npos)
        << kind.name << ": " << reply->reply().getError().getMessage().cStr();
  }
}

TEST_F(WorkerServerTest, MalformedMessagesGetErrorRepliesAndServerKeepsServing) {
  StartWorker();
  RawPeer peer(context_, server_->endpoint());

  {  // Random bytes as a header.
    std::vector<std::byte> junk = RandomBytes(77, 12);
    std::vector<zmq::message_t> frames;
    frames.emplace_back(junk.data(), junk.size());
    peer.SendFrames(std::move(frames));
    auto [id, code] = peer.ReceiveError();
    EXPECT_EQ(id, 0u);
    EXPECT_EQ(code, proto::ErrorCode::INVALID_ARGUMENT);
  }
  {  // A truncated header.
    capnp::MallocMessageBuilder request;
    FillPut(request, "rdd_1_1", StorageLevel::kMemoryOnly, 10, 0, true, 1);
    request.getRoot<proto::Request>().setId(5);
    kj::Array<capnp::word> words = capnp::messageToFlatArray(request);
    std::vector<zmq::message_t> frames;
    frames.emplace_back(words.asBytes().begin(), words.asBytes().size() / 2);
    peer.SendFrames(std::move(frames));
    EXPECT_EQ(peer.ReceiveError().second, proto::ErrorCode::INVALID_ARGUMENT);
  }
  {  // An empty header frame.
    std::vector<zmq::message_t> frames;
    frames.emplace_back();
    peer.SendFrames(std::move(frames));
    EXPECT_EQ(peer.ReceiveError(), std::make_pair(uint64_t{0}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  {  // Too many payload frames.
    capnp::MallocMessageBuilder request;
    FillPut(request, "rdd_1_1", StorageLevel::kMemoryOnly, 100, 0, true, 1);
    std::vector<zmq::message_t> frames;
    for (size_t i = 0; i < kMaxPayloadFrames + 1; ++i) frames.emplace_back(1);
    peer.Send(request, std::move(frames));
    EXPECT_EQ(peer.ReceiveError().second, proto::ErrorCode::TOO_LARGE);
  }
  {  // A bad block id.
    capnp::MallocMessageBuilder request;
    FillPut(request, "rdd_x", StorageLevel::kMemoryOnly, 0, 0, true, 1);
    request.getRoot<proto::Request>().setId(6);
    peer.Send(request);
    EXPECT_EQ(peer.ReceiveError(), std::make_pair(uint64_t{6}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  {  // A request a worker does not serve.
    capnp::MallocMessageBuilder request;
    request.initRoot<proto::Request>().setListWorkers();
    request.getRoot<proto::Request>().setId(7);
    peer.Send(request);
    EXPECT_EQ(peer.ReceiveError(), std::make_pair(uint64_t{7}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  const std::vector<std::byte> data = RandomBytes(2 * kMiB, 13);
  auto send_piece = [&](uint64_t request_id, uint64_t upload, uint64_t offset, size_t n,
                        bool last) {
    capnp::MallocMessageBuilder request;
    FillPut(request, "rdd_1_2", StorageLevel::kMemoryOnly, data.size(), offset, last, upload);
    request.getRoot<proto::Request>().setId(request_id);
    peer.Send(request, Frames(std::span(data).subspan(offset % data.size(), n)));
  };
  {  // A piece at the wrong offset fails and aborts its upload.
    send_piece(10, 1, 0, kMiB, false);
    std::optional<IncomingMessage> first = peer.Receive();
    ASSERT_TRUE(first && first->reply().isPut());
    EXPECT_FALSE(first->reply().getPut().getCommitted());
    send_piece(11, 1, 12345, kMiB - 12345, false);
    EXPECT_EQ(peer.ReceiveError(),
              std::make_pair(uint64_t{11}, proto::ErrorCode::INVALID_ARGUMENT));
    send_piece(12, 1, kMiB, kMiB, true);  // would have been right, but the upload is gone
    EXPECT_EQ(peer.ReceiveError(),
              std::make_pair(uint64_t{12}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  {  // A piece of an upload that never started.
    send_piece(13, 99, kMiB, kMiB, true);
    EXPECT_EQ(peer.ReceiveError(),
              std::make_pair(uint64_t{13}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  {  // A last piece that leaves bytes missing.
    send_piece(14, 2, 0, kMiB, true);
    EXPECT_EQ(peer.ReceiveError(),
              std::make_pair(uint64_t{14}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  {  // More bytes than declared.
    capnp::MallocMessageBuilder request;
    FillPut(request, "rdd_1_3", StorageLevel::kMemoryOnly, 10, 0, true, 3);
    request.getRoot<proto::Request>().setId(15);
    peer.Send(request, Frames(std::span(data).subspan(0, 11)));
    EXPECT_EQ(peer.ReceiveError(),
              std::make_pair(uint64_t{15}, proto::ErrorCode::INVALID_ARGUMENT));
  }
  EXPECT_FALSE(Contains(*channel_, "rdd_1_2").value());
  EXPECT_FALSE(Contains(*channel_, "rdd_1_3").value());

  // Still serving, and the failed uploads left no claimed memory behind.
  EXPECT_TRUE(Ping(*channel_).ok());
  ASSERT_TRUE(Put(*channel_, "rdd_1_2", StorageLevel::kMemoryOnly, data, kMiB).ok());
  Result<GetResult> got = Get(*channel_, "rdd_1_2", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->bytes == data);
  ASSERT_TRUE(master_->WaitFor([&](const std::vector<SeenRequest>& seen) {
    return !seen.empty() && seen.back().kind == SeenRequest::kHeartbeat &&
           seen.back().memory_used == data.size();
  }));
}

TEST_F(WorkerServerTest, SameUploadIdFromTwoClientsDoesNotCollide) {
  StartWorker();
  RpcChannel other(context_, server_->endpoint(), seconds(10));
  const std::vector<std::byte> a = RandomBytes(2 * kMiB, 14);
  const std::vector<std::byte> b = RandomBytes(2 * kMiB, 15);
  auto piece = [](RpcChannel& channel, const std::string& block, const std::vector<std::byte>& data,
                  uint64_t offset, bool last) {
    capnp::MallocMessageBuilder request;
    FillPut(request, block, StorageLevel::kMemoryOnly, data.size(), offset, last, 1);
    return channel.Call(request, Frames(std::span(data).subspan(offset, kMiB))).status();
  };
  ASSERT_TRUE(piece(*channel_, "rdd_10_0", a, 0, false).ok());
  ASSERT_TRUE(piece(other, "rdd_10_1", b, 0, false).ok());
  ASSERT_TRUE(piece(*channel_, "rdd_10_0", a, kMiB, true).ok());
  ASSERT_TRUE(piece(other, "rdd_10_1", b, kMiB, true).ok());
  EXPECT_TRUE(Get(*channel_, "rdd_10_0", 0, kMaxPieceBytes)->bytes == a);
  EXPECT_TRUE(Get(other, "rdd_10_1", 0, kMaxPieceBytes)->bytes == b);
}

TEST_F(WorkerServerTest, IdleUploadIsAbortedAndItsSpaceReleased) {
  options_.upload_idle_timeout = milliseconds(500);
  StartWorker();
  const std::vector<std::byte> data = RandomBytes(2 * kMiB, 16);
  capnp::MallocMessageBuilder first;
  FillPut(first, "rdd_11_0", StorageLevel::kMemoryOnly, 10 * kMiB, 0, false, 1);
  ASSERT_TRUE(channel_->Call(first, Frames(data)).ok());
  // The claim (the bytes received: memory is claimed as they arrive) shows in the stats the
  // worker sends, then goes once the upload expires.
  ASSERT_TRUE(master_->WaitFor([](const std::vector<SeenRequest>& seen) {
    bool claimed = false;
    for (const SeenRequest& r : seen) {
      if (r.kind != SeenRequest::kHeartbeat && r.kind != SeenRequest::kReport) continue;
      if (r.memory_used == 2 * kMiB) claimed = true;
      if (claimed && r.memory_used == 0) return true;
    }
    return false;
  }));
  capnp::MallocMessageBuilder next;
  FillPut(next, "rdd_11_0", StorageLevel::kMemoryOnly, 10 * kMiB, 2 * kMiB, false, 1);
  EXPECT_EQ(channel_->Call(next, Frames(data)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(WorkerServerTest, CachedBlockSurvivesAPutHeaderWhoseBytesNeverCome) {
  memory_bytes_ = 8 * kMiB;
  StartWorker();
  const std::vector<std::byte> cached = RandomBytes(6 * kMiB, 17);
  ASSERT_TRUE(Put(*channel_, "rdd_20_0", StorageLevel::kMemoryOnly, cached).ok());
  // A header declaring a block that only fits if the cached one goes, and no byte after it.
  capnp::MallocMessageBuilder header;
  FillPut(header, "rdd_21_0", StorageLevel::kMemoryOnly, 8 * kMiB, 0, false, 2);
  ASSERT_TRUE(channel_->Call(header).ok());
  Result<GetResult> got = Get(*channel_, "rdd_20_0", 0, 16 * kMiB);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->bytes == cached);
}

TEST_F(WorkerServerTest, OutOfSpaceUploadFailsOnFirstPiece) {
  memory_bytes_ = 4 * kMiB;
  StartWorker();
  capnp::MallocMessageBuilder first;
  FillPut(first, "rdd_12_0", StorageLevel::kMemoryOnly, 8 * kMiB, 0, false, 1);
  EXPECT_EQ(channel_->Call(first).status().code(), StatusCode::kOutOfSpace);
  EXPECT_TRUE(Ping(*channel_).ok());
}

TEST_F(WorkerServerTest, DiskFullMidUploadFailsThatUploadCleanly) {
  StartWorker();
  const std::vector<std::byte> old = RandomBytes(1 * kMiB, 41);
  ASSERT_TRUE(Put(*channel_, "rdd_13_0", StorageLevel::kDiskOnly, old).ok());
  const std::vector<std::byte> data = RandomBytes(6 * kMiB, 42);
  faults_->FillDiskAfter(3 * kMiB);

  Result<IncomingMessage> failed =
      Put(*channel_, "rdd_13_0", StorageLevel::kDiskOnly, data, 2 * kMiB);
  EXPECT_EQ(failed.status().code(), StatusCode::kOutOfSpace) << failed.status().ToString();
  EXPECT_GE(faults_->injected_write_failures(), 1u);
  // The old version is still the one served, and the worker goes on serving.
  Result<GetResult> got = Get(*channel_, "rdd_13_0", 0, kMaxPieceBytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->bytes, old);
  EXPECT_TRUE(Ping(*channel_).ok());

  // Once the disk has room the same upload goes through.
  faults_->ClearFaults();
  ASSERT_TRUE(Put(*channel_, "rdd_13_0", StorageLevel::kDiskOnly, data, 2 * kMiB, 2).ok());
  got = Get(*channel_, "rdd_13_0", 0, 2 * kMiB);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->total_size, data.size());
  EXPECT_TRUE(std::equal(got->bytes.begin(), got->bytes.end(), data.begin()));
}

TEST_F(WorkerServerTest, StalledDiskDelaysNeitherMemoryGetsNorHeartbeats) {
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());
  const std::vector<std::byte> hot = RandomBytes(64 * kKiB, 51);
  ASSERT_TRUE(Put(*channel_, "rdd_14_0", StorageLevel::kMemoryOnly, hot).ok());

  // A disk upload's first piece hangs in the stalled device, on the storage thread.
  faults_->HoldWrites();
  RawPeer uploader(context_, server_->endpoint());
  capnp::MallocMessageBuilder piece;
  FillPut(piece, "rdd_14_1", StorageLevel::kDiskOnly, 2 * kMiB, 0, false, 7);
  const std::vector<std::byte> first = RandomBytes(kMiB, 52);
  uploader.Send(piece, Frames(first));
  ASSERT_TRUE(testing::WaitFor([&] { return faults_->writes_waiting() >= 1; }, seconds(10)));

  // The loop goes on: memory gets are answered and heartbeats go out while the write hangs.
  auto heartbeats = [&] {
    int count = 0;
    master_->WaitFor([&](const std::vector<SeenRequest>& seen) {
      count = static_cast<int>(std::count_if(seen.begin(), seen.end(), [](const SeenRequest& r) {
        return r.kind == SeenRequest::kHeartbeat;
      }));
      return true;
    });
    return count;
  };
  const int before = heartbeats();
  for (int i = 0; i < 20; ++i) {
    Result<GetResult> got = Get(*channel_, "rdd_14_0", 0, kMaxPieceBytes);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->bytes, hot);
  }
  EXPECT_TRUE(testing::WaitFor([&] { return heartbeats() >= before + 2; }, seconds(10)));
  EXPECT_EQ(faults_->writes_waiting(), 1);
  EXPECT_FALSE(uploader.Receive(milliseconds(0)).has_value());  // still being written

  // The disk moves again: the piece is answered.
  faults_->ReleaseWrites();
  std::optional<IncomingMessage> answered = uploader.Receive();
  ASSERT_TRUE(answered.has_value());
  ASSERT_TRUE(answered->reply().isPut()) << "not a put reply";
  EXPECT_FALSE(answered->reply().getPut().getCommitted());
}

// A CPU shared, as on a loaded machine (issue 32: a ThreadSanitizer run on two shared cores): a
// thread that spins on it until destroyed, and whoever calls Join() (at a lower priority, so it
// gets about a tenth of it).
class LoadedCpu {
 public:
  LoadedCpu() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof(allowed), &allowed);
    while (cpu_ < CPU_SETSIZE && !CPU_ISSET(cpu_, &allowed)) ++cpu_;
    hog_ = std::thread([this] {
      Pin();
      while (!stop_.load(std::memory_order_relaxed)) {
      }
    });
  }
  ~LoadedCpu() {
    stop_ = true;
    hog_.join();
  }
  // Moves the calling thread onto the CPU, at nice 10 (CFS weight 110 against the spinner's 1024).
  void Join() const {
    Pin();
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  }

 private:
  void Pin() const {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu_, &one);
    sched_setaffinity(0, sizeof(one), &one);
  }

  int cpu_ = 0;
  std::atomic<bool> stop_{false};
  std::thread hog_;
};

// Issue 32: a loaded worker's master dropped it for want of heartbeats. The loop serves up to 64
// messages per wake-up, and on a loaded machine a put piece is milliseconds of its time (its
// digest checked), so a heartbeat that fell due during a burst went out only when the loop came
// round, hundreds of ms late. It goes out between the pieces: late by about one piece's time.
TEST_F(WorkerServerTest, HeartbeatsGoOutBetweenThePiecesOfABurst) {
  constexpr milliseconds kInterval(50);
  master_->SetHeartbeatInterval(kInterval);
  constexpr uint64_t kPieceBytes = 4 * kMiB;
  // More uploads in flight than a wake-up serves (64 messages), each sending the first piece of
  // its block again and again (a first piece starts its upload afresh), so memory stays bounded
  // however long the burst lasts.
  constexpr int kUploads = 72;
  memory_bytes_ = 2 * kUploads * kPieceBytes;
  LoadedCpu cpu;
  on_loop_thread_ = [&cpu] { cpu.Join(); };
  StartWorker();
  ASSERT_TRUE(AwaitRegistration());

  const std::vector<std::byte> bytes = RandomBytes(kPieceBytes, 61);
  const uint64_t digest = DigestOf(bytes);
  RawPeer uploader(context_, server_->endpoint());
  auto send_piece = [&](uint64_t upload) {
    capnp::MallocMessageBuilder piece;
    FillPut(piece, "rdd_30_" + std::to_string(upload), StorageLevel::kMemoryOnly, 2 * kPieceBytes,
            0, false, upload);
    piece.getRoot<proto::Request>().setId(upload);  // the answer names the upload to send again
    proto::PutBlock::Builder put = piece.getRoot<proto::Request>().getPutBlock();
    put.setDigested(true);
    put.setPieceDigest(digest);
    // Frames pointing into `bytes` (which outlives the sends): the sender copies nothing.
    std::vector<zmq::message_t> frames;
    for (size_t pos = 0; pos < bytes.size(); pos += kChunkBytes) {
      frames.emplace_back(const_cast<std::byte*>(bytes.data() + pos),
                          std::min(kChunkBytes, bytes.size() - pos), nullptr, nullptr);
    }
    uploader.Send(piece, std::move(frames));
  };

  // The burst, for about two seconds: each answer sends that upload's piece again.
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t upload = 1; upload <= kUploads; ++upload) send_piece(upload);
  int outstanding = kUploads;
  int pieces = kUploads;
  while (outstanding > 0) {
    std::optional<IncomingMessage> reply = uploader.Receive();
    ASSERT_TRUE(reply.has_value()) << "no reply within " << kAwait.count() << " s";
    ASSERT_TRUE(reply->reply().isPut()) << "not a put reply";
    --outstanding;
    if (std::chrono::steady_clock::now() - start < seconds(2)) {
      send_piece(reply->reply().getId());
      ++outstanding;
      ++pieces;
    }
  }
  const auto end = std::chrono::steady_clock::now();

  // The master's view: the longest it went without a heartbeat while the burst lasted.
  std::vector<std::chrono::steady_clock::time_point> beats;
  master_->WaitFor([&](const std::vector<SeenRequest>& seen) {
    for (const SeenRequest& r : seen) {
      if (r.kind == SeenRequest::kHeartbeat) beats.push_back(r.arrived);
    }
    return true;
  });
  std::chrono::steady_clock::duration worst_gap{};
  for (size_t i = 1; i < beats.size(); ++i) {
    if (beats[i] < start || beats[i - 1] > end) continue;
    worst_gap = std::max(worst_gap, beats[i] - beats[i - 1]);
  }
  if (!beats.empty() && beats.back() < end) worst_gap = std::max(worst_gap, end - beats.back());
  const auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::duration<double, std::milli>>(d).count();
  };
  const double piece_ms = ms(end - start) / pieces;
  const double late_ms = ms(worst_gap) - ms(kInterval);
  std::cout << pieces << " pieces of " << kPieceBytes / kMiB << " MiB in " << ms(end - start)
            << " ms (" << piece_ms << " ms each); worst heartbeat " << late_ms << " ms late\n";
  // Late by up to a wake-up's 64 pieces when heartbeats wait for the loop to come round; between
  // the pieces, by about one piece's time (and this machine's scheduling).
  EXPECT_LT(late_ms, 24 * piece_ms) << "(a heartbeat is due every " << kInterval.count() << " ms)";
}

TEST_F(WorkerServerTest, StopsPromptlyWhileMasterIsUnreachable) {
  master_->SetSilent(true);
  StartWorker();
  EXPECT_TRUE(Ping(*channel_).ok());
  StopWorker();  // joins the loop thread; a hang fails the test by timeout
}

}  // namespace
}  // namespace bm
