#include "common/net/transport.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/core/protocol.h"

namespace bm {
namespace {

class TransportTest : public ::testing::Test {
 protected:
  TransportTest()
      : server_(context_, zmq::socket_type::router), client_(context_, zmq::socket_type::dealer) {
    ConfigureSocket(server_);
    ConfigureSocket(client_);
    server_.bind("inproc://transport-test");
    client_.connect("inproc://transport-test");
  }

  void SendRaw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      client_.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

  zmq::context_t context_;
  zmq::socket_t server_;
  zmq::socket_t client_;
};

TEST_F(TransportTest, HeaderAndPayloadArriveIntactWithSenderIdentity) {
  capnp::MallocMessageBuilder builder;
  auto request = builder.initRoot<proto::Request>();
  request.setId(42);
  request.initGetBlock().setBlockId("rdd_1_2");
  std::vector<zmq::message_t> payload;
  payload.emplace_back(std::string("hello"));
  payload.emplace_back(std::string(""));
  ASSERT_TRUE(SendMessage(client_, nullptr, builder, std::move(payload)).ok());

  Result<IncomingMessage> received = ReceiveMessage(server_, /*has_routing_id=*/true);
  ASSERT_TRUE(received.ok()) << received.status().ToString();
  EXPECT_TRUE(received->routing_id().has_value());
  EXPECT_EQ(received->request().getId(), 42u);
  EXPECT_EQ(std::string(received->request().getGetBlock().getBlockId()), "rdd_1_2");
  ASSERT_EQ(received->payload().size(), 2u);
  EXPECT_EQ(received->payload()[0].to_string(), "hello");
  EXPECT_EQ(received->payload_bytes(), 5u);
  std::vector<ChunkPtr> chunks = received->TakePayloadChunks();
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]->size(), 5u);
}

TEST_F(TransportTest, RejectsEmptyHeaderAndKeepsSenderForTheErrorReply) {
  SendRaw({""});
  std::optional<zmq::message_t> sender;
  Result<IncomingMessage> received = ReceiveMessage(server_, true, &sender);
  ASSERT_FALSE(received.ok());
  EXPECT_EQ(received.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sender.has_value());
}

TEST_F(TransportTest, RejectsTooManyFramesAndStaysAlignedOnMessages) {
  SendRaw(std::vector<std::string>(kMaxPayloadFrames + 5, "x"));
  capnp::MallocMessageBuilder builder;
  builder.initRoot<proto::Request>().setId(7);
  ASSERT_TRUE(SendMessage(client_, nullptr, builder).ok());

  Result<IncomingMessage> first = ReceiveMessage(server_, true);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), StatusCode::kTooLarge);
  Result<IncomingMessage> second = ReceiveMessage(server_, true);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->request().getId(), 7u);
}

TEST_F(TransportTest, GarbageHeaderFailsInsideReadGuardedInsteadOfThrowing) {
  SendRaw({std::string("\x00\x00\x00\x00\xff\xff\xff\x0f garbage", 17)});
  Result<IncomingMessage> received = ReceiveMessage(server_, true);
  Status status = received.ok() ? ReadGuarded([&]() -> Status {
    (void)received->request().getGetBlock().getBlockId();
    return Status::Ok();
  })
                                : received.status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
}

TEST_F(TransportTest, ChunkFramesAreSentWithoutCopying) {
  ChunkPtr chunk = MakeChunk(std::as_bytes(std::span<const char>("abcdef", 6)));
  zmq::message_t frame = MessageFromChunk(chunk);
  EXPECT_EQ(frame.data(), static_cast<const void*>(chunk->bytes().data()));
  EXPECT_EQ(frame.size(), 6u);
  std::weak_ptr<const Chunk> weak = chunk;
  chunk.reset();
  EXPECT_FALSE(weak.expired()) << "the frame must keep the chunk alive";
  frame = zmq::message_t();
  EXPECT_TRUE(weak.expired());
}

TEST(RpcChannelTest, TimesOutWithUnavailableWhenNobodyAnswers) {
  zmq::context_t context;
  RpcChannel channel(context, "inproc://nobody-listens", std::chrono::milliseconds(100));
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().setPing();
  Result<IncomingMessage> reply = channel.Call(request);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable);
}

TEST(RpcChannelTest, DropsStaleRepliesAndTurnsErrorRepliesIntoStatus) {
  zmq::context_t context;
  zmq::socket_t server(context, zmq::socket_type::router);
  server.bind("inproc://rpc-test");
  RpcChannel channel(context, "inproc://rpc-test", std::chrono::seconds(5));
  std::thread responder([&] {
    Result<IncomingMessage> in = ReceiveMessage(server, true);
    ASSERT_TRUE(in.ok());
    uint64_t id = in->request().getId();
    capnp::MallocMessageBuilder stale;
    stale.initRoot<proto::Reply>().setId(id + 1000);
    ASSERT_TRUE(SendMessage(server, &*in->routing_id(), stale).ok());
    capnp::MallocMessageBuilder error;
    auto reply = error.initRoot<proto::Reply>();
    reply.setId(id);
    SetError(reply.initError(), NotFoundError("no such block"));
    ASSERT_TRUE(SendMessage(server, &*in->routing_id(), error).ok());
  });
  capnp::MallocMessageBuilder request;
  request.initRoot<proto::Request>().setPing();
  Result<IncomingMessage> reply = channel.Call(request);
  responder.join();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reply.status().message(), "no such block");
}

// Several requests in flight: a reply that arrives while another is awaited is kept for its own
// Await, and an abandoned request's reply is dropped.
TEST(RpcChannelTest, RepliesReachTheirOwnAwaitWhateverOrderTheyArriveIn) {
  zmq::context_t context;
  zmq::socket_t server(context, zmq::socket_type::router);
  server.bind("inproc://rpc-window-test");
  RpcChannel channel(context, "inproc://rpc-window-test", std::chrono::seconds(5));
  std::thread responder([&] {
    std::vector<IncomingMessage> requests;
    for (int i = 0; i < 3; ++i) {
      Result<IncomingMessage> in = ReceiveMessage(server, true);
      ASSERT_TRUE(in.ok());
      requests.push_back(std::move(*in));
    }
    // Answered last to first.
    for (int i = 2; i >= 0; --i) {
      capnp::MallocMessageBuilder reply;
      auto root = reply.initRoot<proto::Reply>();
      root.setId(requests[i].request().getId());
      root.initError().setMessage(std::to_string(i));  // which request this answers
      ASSERT_TRUE(SendMessage(server, &*requests[i].routing_id(), reply).ok());
    }
  });
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    capnp::MallocMessageBuilder request;
    request.initRoot<proto::Request>().setPing();
    Result<uint64_t> id = channel.Send(request);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  channel.Abandon(ids[1]);
  Result<IncomingMessage> first = channel.Await(ids[0]);
  responder.join();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(), "0");
  Result<IncomingMessage> third = channel.Await(ids[2]);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().message(), "2");
  // The abandoned one's reply was dropped, not kept.
  Result<IncomingMessage> second = channel.Await(ids[1]);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace bm
