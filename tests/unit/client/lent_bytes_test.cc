#include "client/lent_bytes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/net/transport.h"

namespace bm {
namespace {

std::span<const std::byte> AsBytes(const std::vector<std::byte>& v) { return v; }

TEST(LentBytesTest, ALentChunkViewsTheCallersBytesWithoutCopying) {
  std::vector<std::byte> data(100, std::byte{7});
  LentBytes lent(AsBytes(data));
  ChunkPtr chunk = lent.Lend(10, 20);
  EXPECT_EQ(chunk->bytes().data(), data.data() + 10);
  EXPECT_EQ(chunk->size(), 20u);
}

TEST(LentBytesTest, AwaitReturnedReturnsAtOnceWhenNothingIsHeld) {
  std::vector<std::byte> data(10);
  LentBytes lent(AsBytes(data));
  { ChunkPtr dropped = lent.Lend(0, 10); }
  lent.AwaitReturned();  // would hang if the dropped chunk were still counted
}

TEST(LentBytesTest, AwaitReturnedWaitsForAChunkHeldOnAnotherThread) {
  std::vector<std::byte> data(10);
  LentBytes lent(AsBytes(data));
  std::promise<void> release;
  std::atomic<bool> released{false};
  std::thread holder([chunk = lent.Lend(0, 10), go = release.get_future(), &released]() mutable {
    go.wait();
    released = true;
    chunk.reset();
  });
  auto awaited = std::async(std::launch::async, [&lent]() { lent.AwaitReturned(); });
  EXPECT_EQ(awaited.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  release.set_value();
  awaited.get();
  EXPECT_TRUE(released);
  holder.join();
}

TEST(LentBytesTest, AFrameSentOverTcpIsReturnedOnceZeroMqHasSentIt) {
  zmq::context_t context;
  zmq::socket_t receiver(context, zmq::socket_type::pull);
  ConfigureSocket(receiver);
  receiver.bind("tcp://127.0.0.1:*");
  const std::string endpoint = receiver.get(zmq::sockopt::last_endpoint);
  zmq::socket_t sender(context, zmq::socket_type::push);
  ConfigureSocket(sender);
  sender.connect(endpoint);

  std::vector<std::byte> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i % 251);
  LentBytes lent(AsBytes(data));
  ASSERT_TRUE(sender.send(MessageFromChunk(lent.Lend(0, data.size())), zmq::send_flags::none));
  zmq::message_t received;
  ASSERT_TRUE(receiver.recv(received, zmq::recv_flags::none));
  lent.AwaitReturned();
  // The receiver holds its own copy (TCP), so the caller may now reuse its bytes.
  ASSERT_EQ(received.size(), data.size());
  EXPECT_NE(received.data(), static_cast<void*>(data.data()));
  std::vector<std::byte> before(data);
  std::fill(data.begin(), data.end(), std::byte{0});
  EXPECT_EQ(std::memcmp(received.data(), before.data(), before.size()), 0);
}

}  // namespace
}  // namespace bm
