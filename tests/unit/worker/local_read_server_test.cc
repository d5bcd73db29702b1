#include "worker/local_read_server.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "common/net/local_socket.h"
#include "schema/local_reads.capnp.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/worker/block_manager_sync.h"
#include "tests/unit/worker/in_memory_store.h"
#include "worker/memory_store.h"

// LocalReadServer (worker/local_read_server.h) at its own boundary: a block manager over a
// memory store and an in-memory disk, a clock that moves only when told, and raw seqpacket
// connections made by the test, which plays the worker's loop (Serve, RunCompletions) only
// while it waits for a condition, polling the descriptors involved.

namespace bm {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr auto kAwait = std::chrono::seconds(5);     // a generous bound on any one wait
constexpr uint64_t kBigBlockBytes = 256 * kKiB + 3;  // over the 64 KiB sent inline: a region
constexpr uint64_t kSmallBlockBytes = 1000;          // inline

// A reply, decoded.
struct Reply {
  uint64_t id = 0;
  proto::LocalReply::Which which = proto::LocalReply::OK;
  Status error;  // the error a reply of kind ERROR carries
  // A block's:
  uint64_t size = 0;
  uint64_t generation = 0;
  uint64_t pin = 0;
  bool reused = false;
  bool in_trailer = false;
  uint64_t trailer_offset = 0;
  std::vector<std::byte> inline_bytes;
  // getMany's entries: each an error (Ok for a block) and the block's inline bytes.
  std::vector<std::pair<Status, std::vector<std::byte>>> entries;
  // What came with the packet.
  ChunkPtr trailer;
  OwnedFd fd;
};

Reply Decode(LocalPacket packet) {
  Reply out;
  capnp::FlatArrayMessageReader message(packet.words);
  proto::LocalReply::Reader reply = message.getRoot<proto::LocalReply>();
  auto bytes_of = [](capnp::Data::Reader data) {
    const auto* begin = reinterpret_cast<const std::byte*>(data.begin());
    return std::vector<std::byte>(begin, begin + data.size());
  };
  out.id = reply.getId();
  out.which = reply.which();
  switch (reply.which()) {
    case proto::LocalReply::ERROR:
      out.error = StatusFromError(reply.getError());
      break;
    case proto::LocalReply::BLOCK: {
      proto::LocalBlock::Reader block = reply.getBlock();
      out.size = block.getSize();
      out.generation = block.getGeneration();
      out.pin = block.getPin();
      out.reused = block.getReused();
      out.in_trailer = block.getInTrailer();
      out.trailer_offset = block.getTrailerOffset();
      out.inline_bytes = bytes_of(block.getInline());
      break;
    }
    case proto::LocalReply::BLOCKS:
      for (proto::LocalEntry::Reader entry : reply.getBlocks()) {
        if (entry.isError()) {
          out.entries.emplace_back(StatusFromError(entry.getError()), std::vector<std::byte>{});
        } else {
          out.entries.emplace_back(Status::Ok(), bytes_of(entry.getBlock().getInline()));
        }
      }
      break;
    default:
      break;
  }
  out.trailer = std::move(packet.trailer);
  out.fd = std::move(packet.fd);
  return out;
}

// The `size` bytes of the region `fd`, mapped read-only and copied out.
std::vector<std::byte> MappedBytes(int fd, uint64_t size) {
  void* at = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) return {};
  const auto* begin = static_cast<const std::byte*>(at);
  std::vector<std::byte> bytes(begin, begin + size);
  munmap(at, size);
  return bytes;
}

// An authenticated key of `role`, as a ticket issued over TCP with keys on names it.
PeerIdentity Key(KeyRole role) {
  PeerIdentity key;
  key.role = role;
  key.name = "a key";
  return key;
}

bool Readable(int fd) {
  pollfd ready{fd, POLLIN, 0};
  return ::poll(&ready, 1, 0) > 0;
}

class LocalReadServerTest : public ::testing::Test {
 protected:
  LocalReadServerTest()
      : blocks_(std::make_unique<MemoryStore>(64 * kMiB),
                std::make_unique<testing::InMemoryStore>(64 * kMiB)) {}

  // Starts the server on `options` (its socket in the test's directory).
  void Start(LocalReadServerOptions options = LocalReadServerOptions()) {
    options.socket_path = dir_.Sub("local.sock");
    Result<std::unique_ptr<LocalReadServer>> server =
        LocalReadServer::Create(std::move(options), blocks_, counters_, clock_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  // Plays the worker's loop (serving the socket, running the block manager's completions)
  // until `done()` holds, waking on the server's, the completions' and `client`'s descriptors.
  template <typename Done>
  bool Pump(Done done, int client = -1) {
    const auto give_up = std::chrono::steady_clock::now() + kAwait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      pollfd fds[] = {{server_->poll_fd(), POLLIN, 0},
                      {blocks_.completion_fd(), POLLIN, 0},
                      {blocks_.region_completion_fd(), POLLIN, 0},
                      {client, POLLIN, 0}};
      ::poll(fds, 4, 100);
      if (fds[0].revents != 0) server_->Serve();
      if (fds[1].revents != 0 || fds[2].revents != 0) blocks_.RunCompletions();
    }
    return true;
  }

  // Connects, and waits until the server accepted the connection.
  OwnedFd Connect() {
    const size_t before = server_->readers();
    Result<OwnedFd> socket = ConnectLocal(server_->socket_path());
    EXPECT_TRUE(socket.ok()) << socket.status().ToString();
    if (!socket.ok()) return OwnedFd();
    EXPECT_TRUE(Pump([&] { return server_->readers() > before; }));
    return std::move(socket).value();
  }

  static void Send(int socket, capnp::MessageBuilder& request, int fd = -1) {
    const kj::Array<capnp::word> words = capnp::messageToFlatArray(request);
    const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
    ASSERT_TRUE(SendPacket(socket, std::as_bytes(std::span(bytes.begin(), bytes.size())), fd,
                           /*wait=*/true)
                    .ok());
  }

  // The next packet the server sends on `socket`.
  Result<LocalPacket> Receive(int socket) {
    if (!Pump([&] { return Readable(socket); }, socket)) {
      return UnavailableError("no reply within the test's bound");
    }
    return ReceivePacket(socket, std::chrono::milliseconds(0));
  }

  // Sends `request` and decodes the reply.
  Reply Ask(int socket, capnp::MessageBuilder& request) {
    Send(socket, request);
    Result<LocalPacket> packet = Receive(socket);
    EXPECT_TRUE(packet.ok()) << packet.status().ToString();
    if (!packet.ok()) {
      Reply none;
      none.which = proto::LocalReply::ERROR;
      none.error = packet.status();
      return none;
    }
    return Decode(std::move(packet).value());
  }

  Reply Hello(int socket, const std::string& ticket, uint64_t id = 1) {
    capnp::MallocMessageBuilder request;
    proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
    root.setId(id);
    root.setHello(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(ticket.data()), ticket.size()));
    return Ask(socket, request);
  }

  // A connection that presented a fresh ticket for `peer`.
  OwnedFd Greeted(const std::optional<PeerIdentity>& peer = std::nullopt) {
    OwnedFd socket = Connect();
    const Reply hello = Hello(socket.get(), server_->IssueTicket(peer));
    EXPECT_EQ(hello.which, proto::LocalReply::OK) << hello.error.ToString();
    return socket;
  }

  Reply Get(int socket, const std::string& block, uint64_t id, uint64_t mapped = 0,
            bool trailer = false) {
    capnp::MallocMessageBuilder request;
    proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
    root.setId(id);
    root.setGet(block);
    root.setMapped(mapped);
    root.setTrailer(trailer);
    return Ask(socket, request);
  }

  void Release(int socket, uint64_t pin) {
    capnp::MallocMessageBuilder request;
    proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
    root.setId(99);
    root.setRelease(pin);
    Send(socket, request);
  }

  // Waits until the server closed `socket`'s connection, then reads what it left there: the
  // packets sent before the end.
  std::vector<Reply> Closed(int socket) {
    EXPECT_TRUE(Pump([&] { return server_->readers() == 0; }));
    std::vector<Reply> left;
    while (true) {
      Result<LocalPacket> packet = ReceivePacket(socket, std::chrono::milliseconds(0));
      if (!packet.ok()) {
        // The peer's end, not merely nothing queued.
        EXPECT_EQ(packet.status().code(), StatusCode::kUnavailable) << packet.status().ToString();
        return left;
      }
      left.push_back(Decode(std::move(packet).value()));
    }
  }

  std::vector<std::byte> Put(const std::string& name, uint64_t size, uint64_t seed,
                             StorageLevel level = StorageLevel::kMemoryOnly) {
    const std::vector<std::byte> bytes = testing::RandomByteVector(size, seed);
    Result<BlockId> id = BlockId::Parse(name);
    EXPECT_TRUE(id.ok());
    Result<BlockManager::UploadId> upload = blocks_.BeginPut(*id, level, bytes.size());
    EXPECT_TRUE(upload.ok()) << upload.status().ToString();
    if (!upload.ok()) return {};
    std::vector<ChunkPtr> chunks;
    for (size_t at = 0; at < bytes.size(); at += kChunkBytes) {
      chunks.push_back(
          MakeChunk(std::span(bytes).subspan(at, std::min(kChunkBytes, bytes.size() - at))));
    }
    EXPECT_TRUE(testing::AppendPut(blocks_, *upload, std::move(chunks)).ok());
    EXPECT_TRUE(testing::CommitPut(blocks_, *upload).ok());
    return bytes;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  WorkerCounters counters_;
  BlockManager blocks_;
  std::unique_ptr<LocalReadServer> server_;
};

TEST_F(LocalReadServerTest, CreatesItsSocketFileOwnerReadWriteOnlyAndRemovesItWhenDestroyed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string path = server_->socket_path();
  EXPECT_EQ(path, dir_.Sub("local.sock"));
  struct stat file {};
  ASSERT_EQ(lstat(path.c_str(), &file), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISSOCK(file.st_mode));
  EXPECT_EQ(file.st_mode & 07777, 0600u);
  server_.reset();
  EXPECT_NE(lstat(path.c_str(), &file), 0);
}

TEST_F(LocalReadServerTest, AValidTicketIsAnsweredOkUnderTheHellosRequestId) {
  ASSERT_NO_FATAL_FAILURE(Start());
  OwnedFd socket = Connect();
  EXPECT_EQ(server_->readers(), 1u);
  const Reply hello = Hello(socket.get(), server_->IssueTicket(std::nullopt), /*id=*/7);
  EXPECT_EQ(hello.which, proto::LocalReply::OK) << hello.error.ToString();
  EXPECT_EQ(hello.id, 7u);
  EXPECT_FALSE(hello.fd.valid());
  EXPECT_EQ(server_->readers(), 1u);
  // The ticket is spent: nothing is left for Expire.
  EXPECT_FALSE(server_->NextDeadline().has_value());
}

TEST_F(LocalReadServerTest, AnUnknownTicketIsRefusedAndTheConnectionClosed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  OwnedFd socket = Connect();
  const Reply hello = Hello(socket.get(), "not a ticket this worker issued");
  EXPECT_EQ(hello.which, proto::LocalReply::ERROR);
  EXPECT_EQ(hello.error.code(), StatusCode::kPermissionDenied) << hello.error.ToString();
  EXPECT_TRUE(Closed(socket.get()).empty());
  EXPECT_EQ(counters_.local_reads_refused, 1u);
}

TEST_F(LocalReadServerTest, ATicketIsSingleUseASecondConnectionPresentingItIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string ticket = server_->IssueTicket(std::nullopt);
  OwnedFd first = Connect();
  EXPECT_EQ(Hello(first.get(), ticket).which, proto::LocalReply::OK);
  OwnedFd second = Connect();
  ASSERT_EQ(server_->readers(), 2u);
  const Reply again = Hello(second.get(), ticket);
  EXPECT_EQ(again.error.code(), StatusCode::kPermissionDenied) << again.error.ToString();
  EXPECT_TRUE(Pump([&] { return server_->readers() == 1; }));
  // A second hello on the greeted connection is refused too (and ends it).
  const Reply twice = Hello(first.get(), server_->IssueTicket(std::nullopt));
  EXPECT_EQ(twice.error.code(), StatusCode::kPermissionDenied) << twice.error.ToString();
  EXPECT_TRUE(Closed(first.get()).empty());
}

TEST_F(LocalReadServerTest, ATicketHoldsForItsLifetimeThenIsRefusedAndExpireForgetsIt) {
  LocalReadServerOptions options;
  options.ticket_lifetime = seconds(30);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const TimePoint issued = clock_.Now();
  const std::string on_time = server_->IssueTicket(std::nullopt);
  const std::string late = server_->IssueTicket(std::nullopt);
  EXPECT_EQ(server_->NextDeadline(), issued + seconds(30));

  // At the very end of its lifetime a ticket still holds; a moment later it does not.
  clock_.Advance(seconds(30));
  OwnedFd first = Connect();
  EXPECT_EQ(Hello(first.get(), on_time).which, proto::LocalReply::OK);
  clock_.Advance(nanoseconds(1));
  OwnedFd second = Connect();
  const Reply refused = Hello(second.get(), late);
  EXPECT_EQ(refused.error.code(), StatusCode::kPermissionDenied) << refused.error.ToString();

  // Refused, yet still held until Expire drops it.
  EXPECT_EQ(server_->NextDeadline(), issued + seconds(30));
  server_->Expire();
  EXPECT_FALSE(server_->NextDeadline().has_value());
}

TEST_F(LocalReadServerTest, AGetBeforeAValidTicketIsRefusedAndTheConnectionClosed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Connect();
  const Reply get = Get(socket.get(), "rdd_1_0", /*id=*/5);
  EXPECT_EQ(get.which, proto::LocalReply::ERROR);
  EXPECT_EQ(get.error.code(), StatusCode::kPermissionDenied) << get.error.ToString();
  EXPECT_EQ(get.id, 0u);  // the connection's error, not the request's
  EXPECT_TRUE(Closed(socket.get()).empty());
  EXPECT_EQ(counters_.block_reads_local, 0u);
}

TEST_F(LocalReadServerTest, AGetOfABlockNotStoredHereIsAnsweredNotFoundAndTheConnectionServesOn) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply missing = Get(socket.get(), "rdd_9_9", /*id=*/3);
  EXPECT_EQ(missing.which, proto::LocalReply::ERROR);
  EXPECT_EQ(missing.id, 3u);
  EXPECT_EQ(missing.error.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.error.message().find("rdd_9_9"), std::string::npos) << missing.error.ToString();
  EXPECT_NE(missing.error.message().find("not stored here"), std::string::npos)
      << missing.error.ToString();
  // The connection stays: the next get is served.
  const Reply found = Get(socket.get(), "rdd_1_0", /*id=*/4);
  EXPECT_EQ(found.which, proto::LocalReply::BLOCK) << found.error.ToString();
  EXPECT_TRUE(found.inline_bytes == bytes);
  EXPECT_EQ(server_->readers(), 1u);
}

TEST_F(LocalReadServerTest,
       AGetOfAnUnparsableBlockIdIsAnsweredWithAnErrorAndTheConnectionServesOn) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply bad = Get(socket.get(), "no such kind of id", /*id=*/3);
  EXPECT_EQ(bad.which, proto::LocalReply::ERROR);
  EXPECT_EQ(bad.id, 3u);
  EXPECT_FALSE(bad.error.ok());
  const Reply found = Get(socket.get(), "rdd_1_0", /*id=*/4);
  EXPECT_EQ(found.which, proto::LocalReply::BLOCK) << found.error.ToString();
  EXPECT_TRUE(found.inline_bytes == bytes);
}

TEST_F(LocalReadServerTest, AMalformedPacketIsAnsweredInvalidArgumentAndOnlyItsConnectionClosed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd other = Greeted();
  OwnedFd socket = Greeted();
  ASSERT_EQ(server_->readers(), 2u);
  // Whole words, but no Cap'n Proto message: a segment table claiming 1000 words.
  std::vector<std::byte> garbage(16, std::byte{0});
  garbage[4] = std::byte{0xe8};
  garbage[5] = std::byte{0x03};
  ASSERT_TRUE(SendPacket(socket.get(), garbage, -1, /*wait=*/true).ok());
  Result<LocalPacket> packet = Receive(socket.get());
  ASSERT_TRUE(packet.ok()) << packet.status().ToString();
  const Reply error = Decode(std::move(packet).value());
  EXPECT_EQ(error.which, proto::LocalReply::ERROR);
  EXPECT_EQ(error.id, 0u);
  EXPECT_EQ(error.error.code(), StatusCode::kInvalidArgument) << error.error.ToString();
  EXPECT_TRUE(Pump([&] { return server_->readers() == 1; }));
  EXPECT_EQ(ReceivePacket(socket.get(), std::chrono::milliseconds(0)).status().code(),
            StatusCode::kUnavailable);
  // The server serves on: the other connection's get is answered.
  const Reply found = Get(other.get(), "rdd_1_0", /*id=*/2);
  EXPECT_EQ(found.which, proto::LocalReply::BLOCK) << found.error.ToString();
  EXPECT_TRUE(found.inline_bytes == bytes);
}

TEST_F(LocalReadServerTest, APacketNotOfWholeWordsClosesItsConnectionUnanswered) {
  ASSERT_NO_FATAL_FAILURE(Start());
  OwnedFd socket = Greeted();
  const std::vector<std::byte> odd(5, std::byte{1});
  ASSERT_TRUE(SendPacket(socket.get(), odd, -1, /*wait=*/true).ok());
  EXPECT_TRUE(Closed(socket.get()).empty());
}

TEST_F(LocalReadServerTest, ARequestCarryingADescriptorClosesItsConnectionUnanswered) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Greeted();
  capnp::MallocMessageBuilder request;
  proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
  root.setId(2);
  root.setGet("rdd_1_0");
  OwnedFd passed(dup(socket.get()));
  ASSERT_NO_FATAL_FAILURE(Send(socket.get(), request, passed.get()));
  EXPECT_TRUE(Closed(socket.get()).empty());
  EXPECT_EQ(counters_.block_reads_local, 0u);
}

TEST_F(LocalReadServerTest, ASmallBlockComesInlineExactAndPinsNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  EXPECT_EQ(got.id, 2u);
  EXPECT_EQ(got.size, bytes.size());
  EXPECT_TRUE(got.inline_bytes == bytes);
  EXPECT_EQ(got.pin, 0u);
  EXPECT_FALSE(got.in_trailer);
  EXPECT_FALSE(got.fd.valid());
  EXPECT_EQ(got.trailer, nullptr);
  EXPECT_EQ(server_->pins(), 0u);
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
  EXPECT_EQ(counters_.block_reads_local, 1u);
  EXPECT_EQ(counters_.local_read_bytes, bytes.size());
}

TEST_F(LocalReadServerTest, ASmallBlockAskedInTheTrailerComesAfterTheMessageExact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2, /*mapped=*/0, /*trailer=*/true);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  EXPECT_TRUE(got.in_trailer);
  EXPECT_EQ(got.trailer_offset, 0u);
  EXPECT_TRUE(got.inline_bytes.empty());
  ASSERT_NE(got.trailer, nullptr);
  const std::span<const std::byte> trailer = got.trailer->bytes();
  EXPECT_TRUE(std::vector<std::byte>(trailer.begin(), trailer.end()) == bytes);
}

TEST_F(LocalReadServerTest, ABigBlockComesAsARegionWhoseBytesAreExactAndIsPinnedUntilReleased) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  EXPECT_EQ(got.id, 2u);
  EXPECT_EQ(got.size, bytes.size());
  EXPECT_NE(got.pin, 0u);
  EXPECT_TRUE(got.inline_bytes.empty());
  ASSERT_TRUE(got.fd.valid());
  EXPECT_TRUE(MappedBytes(got.fd.get(), got.size) == bytes);
  EXPECT_EQ(server_->pins(), 1u);
  EXPECT_EQ(blocks_.pinned_bytes(), bytes.size());
  EXPECT_EQ(counters_.local_read_bytes, bytes.size());

  // A release of a pin this connection does not hold changes nothing (and is not answered).
  Release(socket.get(), got.pin + 1000);
  Release(socket.get(), got.pin);
  EXPECT_TRUE(Pump([&] { return server_->pins() == 0; }));
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
  EXPECT_FALSE(Readable(socket.get()));
  EXPECT_EQ(server_->readers(), 1u);
}

TEST_F(LocalReadServerTest, ABlockOnDiskIsReadIntoARegionHeldInTheMemoryBudgetUntilReleased) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kBigBlockBytes, 1, StorageLevel::kDiskOnly);
  ASSERT_EQ(blocks_.Find(*BlockId::Parse("rdd_1_0"))->tier, Tier::kDisk);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  ASSERT_TRUE(got.fd.valid());
  EXPECT_NE(got.pin, 0u);
  EXPECT_TRUE(MappedBytes(got.fd.get(), got.size) == bytes);
  EXPECT_EQ(server_->pins(), 1u);
  EXPECT_EQ(blocks_.pinned_bytes(), bytes.size());
  Release(socket.get(), got.pin);
  EXPECT_TRUE(Pump([&] { return server_->pins() == 0; }));
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
}

TEST_F(LocalReadServerTest, ASmallBlockOnDiskComesInlineExact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1, StorageLevel::kDiskOnly);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  EXPECT_TRUE(got.inline_bytes == bytes);
  EXPECT_FALSE(got.fd.valid());
  EXPECT_EQ(server_->pins(), 0u);
}

TEST_F(LocalReadServerTest, ClosingTheConnectionReleasesEveryPinItHeld) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> first = Put("rdd_1_0", kBigBlockBytes, 1);
  const std::vector<std::byte> second = Put("rdd_1_1", kBigBlockBytes, 2);
  OwnedFd socket = Greeted();
  const Reply a = Get(socket.get(), "rdd_1_0", /*id=*/2);
  const Reply b = Get(socket.get(), "rdd_1_1", /*id=*/3);
  ASSERT_TRUE(a.fd.valid());
  ASSERT_TRUE(b.fd.valid());
  EXPECT_NE(a.pin, b.pin);
  EXPECT_EQ(server_->pins(), 2u);
  EXPECT_EQ(blocks_.pinned_bytes(), first.size() + second.size());
  socket.Reset();
  EXPECT_TRUE(Pump([&] { return server_->readers() == 0; }));
  EXPECT_EQ(server_->pins(), 0u);
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
}

TEST_F(LocalReadServerTest, DestroyingTheServerReleasesEveryPin) {
  ASSERT_NO_FATAL_FAILURE(Start());
  Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_TRUE(got.fd.valid());
  ASSERT_GT(blocks_.pinned_bytes(), 0u);
  server_.reset();
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
}

TEST_F(LocalReadServerTest, ARemovedBlockStaysCountedWhileItsRegionIsPinnedAndIsNotServedAnew) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_TRUE(got.fd.valid());
  ASSERT_TRUE(blocks_.Remove(*BlockId::Parse("rdd_1_0")).ok());
  EXPECT_EQ(blocks_.pinned_bytes(), bytes.size());
  EXPECT_TRUE(MappedBytes(got.fd.get(), got.size) == bytes);
  // Offering the old pin finds the block gone.
  const Reply again = Get(socket.get(), "rdd_1_0", /*id=*/3, /*mapped=*/got.pin);
  EXPECT_EQ(again.error.code(), StatusCode::kNotFound) << again.error.ToString();
  Release(socket.get(), got.pin);
  EXPECT_TRUE(Pump([&] { return server_->pins() == 0; }));
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
}

TEST_F(LocalReadServerTest, OfferingAMappedPinOfTheCurrentVersionIsAnsweredReusedWithNoNewRegion) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> bytes = Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const Reply first = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_TRUE(first.fd.valid());
  const Reply again = Get(socket.get(), "rdd_1_0", /*id=*/3, /*mapped=*/first.pin);
  ASSERT_EQ(again.which, proto::LocalReply::BLOCK) << again.error.ToString();
  EXPECT_TRUE(again.reused);
  EXPECT_EQ(again.pin, first.pin);
  EXPECT_EQ(again.size, bytes.size());
  EXPECT_EQ(again.generation, first.generation);
  EXPECT_FALSE(again.fd.valid());
  EXPECT_EQ(server_->pins(), 1u);
  EXPECT_EQ(counters_.block_reads_local, 2u);

  // Once the block is put anew, the old pin is not the current version: a new region comes.
  ASSERT_TRUE(blocks_.Remove(*BlockId::Parse("rdd_1_0")).ok());
  const std::vector<std::byte> newer = Put("rdd_1_0", kBigBlockBytes, 2);
  const Reply fresh = Get(socket.get(), "rdd_1_0", /*id=*/4, /*mapped=*/first.pin);
  ASSERT_EQ(fresh.which, proto::LocalReply::BLOCK) << fresh.error.ToString();
  EXPECT_FALSE(fresh.reused);
  EXPECT_NE(fresh.pin, first.pin);
  ASSERT_TRUE(fresh.fd.valid());
  EXPECT_TRUE(MappedBytes(fresh.fd.get(), fresh.size) == newer);
  EXPECT_EQ(server_->pins(), 2u);
  // The old region is unchanged.
  EXPECT_TRUE(MappedBytes(first.fd.get(), first.size) == bytes);
}

TEST_F(LocalReadServerTest, AGetPastTheReadersPinLimitIsRefusedOutOfSpaceUntilOneIsReleased) {
  LocalReadServerOptions options;
  options.max_pins_per_reader = 1;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  Put("rdd_1_0", kBigBlockBytes, 1);
  const std::vector<std::byte> second = Put("rdd_1_1", kBigBlockBytes, 2);
  const std::vector<std::byte> small = Put("rdd_1_2", kSmallBlockBytes, 3);
  OwnedFd socket = Greeted();
  const Reply first = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_NE(first.pin, 0u);
  const Reply refused = Get(socket.get(), "rdd_1_1", /*id=*/3);
  EXPECT_EQ(refused.which, proto::LocalReply::ERROR);
  EXPECT_EQ(refused.id, 3u);
  EXPECT_EQ(refused.error.code(), StatusCode::kOutOfSpace) << refused.error.ToString();
  // Inline blocks take no pin, so they are still served.
  const Reply inline_block = Get(socket.get(), "rdd_1_2", /*id=*/4);
  EXPECT_TRUE(inline_block.inline_bytes == small) << inline_block.error.ToString();
  Release(socket.get(), first.pin);
  const Reply served = Get(socket.get(), "rdd_1_1", /*id=*/5);
  ASSERT_TRUE(served.fd.valid()) << served.error.ToString();
  EXPECT_TRUE(MappedBytes(served.fd.get(), served.size) == second);
  EXPECT_EQ(server_->pins(), 1u);
}

TEST_F(LocalReadServerTest, ExpireDropsAPinOnceItsLifetimeHasPassedAndTheMappingStaysIntact) {
  LocalReadServerOptions options;
  options.pin_lifetime = seconds(60);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const std::vector<std::byte> bytes = Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const TimePoint granted = clock_.Now();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_TRUE(got.fd.valid());
  void* mapping = mmap(nullptr, got.size, PROT_READ, MAP_SHARED, got.fd.get(), 0);
  ASSERT_NE(mapping, MAP_FAILED);
  EXPECT_EQ(server_->NextDeadline(), granted + seconds(60));

  clock_.Advance(seconds(60) - nanoseconds(1));
  server_->Expire();
  EXPECT_EQ(server_->pins(), 1u);
  EXPECT_EQ(server_->pins_expired(), 0u);
  EXPECT_EQ(blocks_.pinned_bytes(), bytes.size());

  clock_.Advance(nanoseconds(1));
  server_->Expire();
  EXPECT_EQ(server_->pins(), 0u);
  EXPECT_EQ(server_->pins_expired(), 1u);
  EXPECT_EQ(blocks_.pinned_bytes(), 0u);
  EXPECT_FALSE(server_->NextDeadline().has_value());
  // The reader keeps its connection and its mapping, bytes unchanged.
  EXPECT_EQ(server_->readers(), 1u);
  EXPECT_EQ(std::memcmp(mapping, bytes.data(), bytes.size()), 0);
  munmap(mapping, got.size);
  // Its late release of the expired pin changes nothing.
  Release(socket.get(), got.pin);
  const Reply next = Get(socket.get(), "rdd_1_0", /*id=*/3);
  EXPECT_TRUE(next.fd.valid()) << next.error.ToString();
  EXPECT_EQ(server_->pins(), 1u);
}

TEST_F(LocalReadServerTest, AReusedPinKeepsTheLifetimeOfItsFirstGrant) {
  LocalReadServerOptions options;
  options.pin_lifetime = seconds(60);
  ASSERT_NO_FATAL_FAILURE(Start(options));
  Put("rdd_1_0", kBigBlockBytes, 1);
  OwnedFd socket = Greeted();
  const TimePoint granted = clock_.Now();
  const Reply got = Get(socket.get(), "rdd_1_0", /*id=*/2);
  ASSERT_NE(got.pin, 0u);
  clock_.Advance(seconds(30));
  const Reply again = Get(socket.get(), "rdd_1_0", /*id=*/3, /*mapped=*/got.pin);
  ASSERT_TRUE(again.reused) << again.error.ToString();
  EXPECT_EQ(server_->NextDeadline(), granted + seconds(60));
  clock_.Advance(seconds(30));
  server_->Expire();
  EXPECT_EQ(server_->pins_expired(), 1u);
  EXPECT_EQ(server_->pins(), 0u);
}

TEST_F(LocalReadServerTest, GetManyAnswersEachIdInOrderSmallMemoryBlocksInline) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::vector<std::byte> a = Put("rdd_1_0", kSmallBlockBytes, 1);
  Put("rdd_1_1", kBigBlockBytes, 2);
  const std::vector<std::byte> c = Put("rdd_1_2", kSmallBlockBytes + 1, 3);
  OwnedFd socket = Greeted();
  capnp::MallocMessageBuilder request;
  proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
  root.setId(2);
  auto ids = root.initGetMany(4);
  ids.set(0, "rdd_1_0");
  ids.set(1, "rdd_1_1");
  ids.set(2, "rdd_9_9");
  ids.set(3, "rdd_1_2");
  const Reply got = Ask(socket.get(), request);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCKS) << got.error.ToString();
  EXPECT_EQ(got.id, 2u);
  ASSERT_EQ(got.entries.size(), 4u);
  EXPECT_TRUE(got.entries[0].first.ok());
  EXPECT_TRUE(got.entries[0].second == a);
  EXPECT_EQ(got.entries[1].first.code(), StatusCode::kUnavailable);  // too big: read it alone
  EXPECT_EQ(got.entries[2].first.code(), StatusCode::kNotFound);
  EXPECT_TRUE(got.entries[3].first.ok());
  EXPECT_TRUE(got.entries[3].second == c);
  EXPECT_EQ(server_->pins(), 0u);
  EXPECT_EQ(counters_.block_reads_local, 2u);
}

TEST_F(LocalReadServerTest, AShuffleReadIsRefusedUnavailableWhenTheServerHasNoShuffles) {
  ASSERT_NO_FATAL_FAILURE(Start());
  OwnedFd socket = Greeted();
  capnp::MallocMessageBuilder request;
  proto::LocalRequest::Builder root = request.initRoot<proto::LocalRequest>();
  root.setId(2);
  root.initReadShuffle().setShuffleId(1);
  const Reply got = Ask(socket.get(), request);
  EXPECT_EQ(got.which, proto::LocalReply::ERROR);
  EXPECT_EQ(got.id, 2u);
  EXPECT_EQ(got.error.code(), StatusCode::kUnavailable) << got.error.ToString();
  EXPECT_EQ(server_->readers(), 1u);
}

TEST_F(LocalReadServerTest, WithKeysOnAGetIsAuthorizedAsTheTicketsKeyWouldBeOverTcp) {
  LocalReadServerOptions options;
  options.secure = true;
  ASSERT_NO_FATAL_FAILURE(Start(options));
  const std::vector<std::byte> bytes = Put("rdd_1_0", kSmallBlockBytes, 1);
  // A master key may not read blocks; the refusal answers the request, the connection stays.
  OwnedFd master = Greeted(Key(KeyRole::kMaster));
  const Reply refused = Get(master.get(), "rdd_1_0", /*id=*/2);
  EXPECT_EQ(refused.which, proto::LocalReply::ERROR);
  EXPECT_EQ(refused.id, 2u);
  EXPECT_EQ(refused.error.code(), StatusCode::kPermissionDenied) << refused.error.ToString();
  EXPECT_EQ(server_->readers(), 1u);
  // A ticket issued to no key acts as no one: refused too.
  OwnedFd anonymous = Greeted(std::nullopt);
  EXPECT_EQ(Get(anonymous.get(), "rdd_1_0", /*id=*/2).error.code(), StatusCode::kPermissionDenied);
  // A client key reads.
  OwnedFd client = Greeted(Key(KeyRole::kClient));
  const Reply got = Get(client.get(), "rdd_1_0", /*id=*/2);
  ASSERT_EQ(got.which, proto::LocalReply::BLOCK) << got.error.ToString();
  EXPECT_TRUE(got.inline_bytes == bytes);
  EXPECT_EQ(counters_.local_reads_refused, 2u);
}

}  // namespace
}  // namespace bm
