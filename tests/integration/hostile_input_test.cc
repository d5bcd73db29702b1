// Garbage sent to the master's and a worker's ports gets errors or is dropped; the servers keep
// serving and lose nothing.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "common/net/transport.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

// Sends every kind of malformed message we can think of over ZeroMQ.
void SendGarbageFrames(zmq::context_t& context, const std::string& endpoint) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 1000);
  socket.connect(endpoint);
  std::mt19937_64 rng(42);
  auto send = [&](std::vector<std::string> frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      socket.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  send({""});                                                                 // empty header
  send({"x"});                                                                // one byte
  for (int i = 0; i < 20; ++i) send({RandomBytes(1 + rng() % 3000, rng())});  // random headers
  send({RandomBytes(64, 1), RandomBytes(1000, 2)});  // random header with payload
  send(std::vector<std::string>(100, "p"));          // too many frames
  // A real request, truncated.
  capnp::MallocMessageBuilder builder;
  auto request = builder.initRoot<proto::Request>();
  request.setId(5);
  auto locations = request.initGetLocations().initBlockIds(3);
  locations.set(0, "rdd_1_0");
  locations.set(1, "rdd_1_1");
  locations.set(2, "not_a_block");
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  std::string whole(reinterpret_cast<const char*>(words.begin()), words.size() * 8);
  send({whole.substr(0, whole.size() / 2)});
  send({whole});  // valid shape, bad block id
  // A put piece claiming a huge size, and one with a payload that disagrees with its offset.
  capnp::MallocMessageBuilder put;
  auto piece = put.initRoot<proto::Request>().initPutBlock();
  piece.setBlockId("rdd_1_0");
  piece.setTotalSize(uint64_t{1} << 62);
  piece.setOffset(12345);
  piece.setUploadId(7);
  kj::Array<capnp::word> put_words = capnp::messageToFlatArray(put);
  send({std::string(reinterpret_cast<const char*>(put_words.begin()), put_words.size() * 8),
        RandomBytes(100, 3)});
  // Wait until the server has answered something, so the garbage was really read.
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(5000));
  EXPECT_TRUE(item.revents & ZMQ_POLLIN) << "no error reply from " << endpoint;
}

// Writes random bytes straight into the TCP port (not even ZMTP).
void SendRawTcpGarbage(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string junk = RandomBytes(1 << 16, 99);
  (void)!write(fd, junk.data(), junk.size());
  close(fd);
}

int PortOf(const std::string& endpoint) {
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

TEST(HostileInputTest, GarbageLeavesMasterAndWorkerServingWithDataIntact) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  std::string memory_block = RandomBytes(100000, 1);
  std::string disk_block = RandomBytes(2 << 20, 2);
  ASSERT_EQ(
      cluster.Bmctl({"put", "rdd_1_0", "-", "--level", "MEMORY_ONLY"}, memory_block).exit_code, 0);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_1_1", "-", "--level", "DISK_ONLY"}, disk_block).exit_code,
            0);

  zmq::context_t context;
  for (const std::string& endpoint : {cluster.master_endpoint(), cluster.worker_endpoint("w1")}) {
    ASSERT_NO_FATAL_FAILURE(SendGarbageFrames(context, endpoint));
    ASSERT_NO_FATAL_FAILURE(SendRawTcpGarbage(PortOf(endpoint)));
  }

  EXPECT_TRUE(cluster.master_process().Running()) << cluster.LogTail("master");
  EXPECT_TRUE(cluster.worker_process("w1").Running()) << cluster.LogTail("w1");
  EXPECT_EQ(cluster.ListedWorkers(), std::vector<std::string>{"w1"});
  CommandResult get_memory = cluster.Bmctl({"get", "rdd_1_0"});
  ASSERT_EQ(get_memory.exit_code, 0) << get_memory.err;
  EXPECT_TRUE(get_memory.out == memory_block);
  CommandResult get_disk = cluster.Bmctl({"get", "rdd_1_1"});
  ASSERT_EQ(get_disk.exit_code, 0) << get_disk.err;
  EXPECT_TRUE(get_disk.out == disk_block);
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_1_2", "-"}, "still works").exit_code, 0);
}

// An upload announcing 2^63 bytes was taken as disk use (and a second wrapped the counter).
TEST(HostileInputTest, PutClaimingTwoToTheSixtyThreeBytesIsRefusedAndCountsNothing) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker({"w1", "64MiB", ""}));
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(cluster.worker_endpoint("w1"));
  for (uint64_t upload = 1; upload <= 2; ++upload) {
    for (proto::StorageLevel level :
         {proto::StorageLevel::DISK_ONLY, proto::StorageLevel::MEMORY_AND_DISK}) {
      capnp::MallocMessageBuilder put;
      auto request = put.initRoot<proto::Request>();
      request.setId(upload);
      auto piece = request.initPutBlock();
      piece.setBlockId("rdd_1_" + std::to_string(upload));
      piece.setLevel(level);
      piece.setTotalSize(uint64_t{1} << 63);
      piece.setOffset(0);
      piece.setUploadId(upload * 10 + static_cast<uint64_t>(level));
      kj::Array<capnp::word> words = capnp::messageToFlatArray(put);
      zmq::message_t header(words.begin(), words.size() * sizeof(capnp::word));
      zmq::message_t payload(std::string(1000, 'x'));
      socket.send(header, zmq::send_flags::sndmore);
      socket.send(payload, zmq::send_flags::none);

      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(5000));
      ASSERT_TRUE(item.revents & ZMQ_POLLIN) << "no reply to a put of 2^63 bytes";
      zmq::message_t reply_frame;
      ASSERT_TRUE(socket.recv(reply_frame));
      while (reply_frame.more()) {
        zmq::message_t rest;
        ASSERT_TRUE(socket.recv(rest));
        if (!rest.more()) break;
      }
      kj::Array<capnp::word> aligned = kj::heapArray<capnp::word>(
          (reply_frame.size() + sizeof(capnp::word) - 1) / sizeof(capnp::word));
      std::memcpy(aligned.begin(), reply_frame.data(), reply_frame.size());
      capnp::FlatArrayMessageReader reader(aligned);
      proto::Reply::Reader reply = reader.getRoot<proto::Reply>();
      ASSERT_TRUE(reply.isError()) << "a put of 2^63 bytes was accepted";
      const proto::ErrorCode code = reply.getError().getCode();
      EXPECT_TRUE(code == proto::ErrorCode::OUT_OF_SPACE ||
                  code == proto::ErrorCode::INVALID_ARGUMENT);
      EXPECT_FALSE(std::string(reply.getError().getMessage().cStr()).empty());
    }
  }
  EXPECT_TRUE(cluster.worker_process("w1").Running()) << cluster.LogTail("w1");
  // The master's view, after the worker's next heartbeat at the latest.
  ASSERT_EQ(cluster.Bmctl({"put", "rdd_2_0", "-", "--level", "DISK_ONLY"}, "sane").exit_code, 0);
  nlohmann::json workers = cluster.BmctlJson({"workers"});
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_LT(workers[0]["disk_used"].get<uint64_t>(), uint64_t{1} << 30) << workers.dump();
  EXPECT_GE(workers[0]["disk_capacity"].get<uint64_t>(), workers[0]["disk_used"].get<uint64_t>());
  CommandResult table = cluster.Bmctl({"workers"});
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_EQ(table.out.find("EiB"), std::string::npos) << table.out;
}

}  // namespace
}  // namespace bm::testing
