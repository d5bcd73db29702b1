#include "master/request_socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/core/protocol.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

class RequestSocketTest : public ::testing::Test {
 protected:
  RequestSocketTest() : socket_(Bind(context_), /*max_messages_per_wake=*/2) {
    client_.connect(kAddress);
  }
  static zmq::socket_t Bind(zmq::context_t& context) {
    zmq::socket_t router(context, zmq::socket_type::router);
    ConfigureServerSocket(router, CurveKeys{});
    router.bind(kAddress);
    return router;
  }
  void Ping(uint64_t id) {
    capnp::MallocMessageBuilder message;
    proto::Request::Builder request = message.initRoot<proto::Request>();
    request.setId(id);
    request.setPing();
    ASSERT_TRUE(SendMessage(client_, nullptr, message).ok());
  }
  // Waits (up to 5 s) until the socket has a message.
  void WaitForRequest() {
    zmq::pollitem_t item{socket_.socket().handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, milliseconds(5000)), 1);
  }

  static constexpr const char* kAddress = "inproc://request-socket-test";
  zmq::context_t context_;
  RequestSocket socket_;
  zmq::socket_t client_{context_, zmq::socket_type::dealer};
};

TEST_F(RequestSocketTest, DrainHandsEachRequestOverAndRepliesReachTheClient) {
  Ping(1);
  WaitForRequest();
  std::vector<uint64_t> ids;
  socket_.Drain([&](const zmq::message_t& client) {
    Result<IncomingMessage> request = socket_.ReceiveRest();
    ASSERT_TRUE(request.ok()) << request.status().ToString();
    ids.push_back(request->request().getId());
    capnp::MallocMessageBuilder message(socket_.reply_segment());
    proto::Reply::Builder reply = message.initRoot<proto::Reply>();
    reply.setId(request->request().getId());
    reply.setOk();
    socket_.Send(client, message);
  });
  EXPECT_THAT(ids, ::testing::ElementsAre(1u));
  // The receive that found nothing came after the reply was sent: it settled the socket.
  EXPECT_FALSE(socket_.unsettled());

  zmq::pollitem_t item{client_.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, milliseconds(5000)), 1);
  Result<IncomingMessage> reply = ReceiveMessage(client_, /*has_routing_id=*/false);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->reply().getId(), 1u);
  EXPECT_TRUE(reply->reply().isOk());
}

TEST_F(RequestSocketTest, DrainThatFindsNothingSettlesTheSocketUntilItIsSentOn) {
  EXPECT_TRUE(socket_.unsettled());
  socket_.Drain([](const zmq::message_t&) { ADD_FAILURE() << "nothing was sent"; });
  EXPECT_FALSE(socket_.unsettled());
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Reply>().setOk();
  socket_.Send(zmq::message_t("gone", 4), message);  // unroutable: dropped
  EXPECT_TRUE(socket_.unsettled());
}

TEST_F(RequestSocketTest, DrainStopsAtItsBoundAndStaysUnsettled) {
  for (uint64_t id = 1; id <= 3; ++id) Ping(id);
  WaitForRequest();
  // All three were queued on the inproc pipe before the first could be read.
  std::vector<uint64_t> ids;
  socket_.Drain(
      [&](const zmq::message_t&) { ids.push_back(socket_.ReceiveRest()->request().getId()); });
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_TRUE(socket_.unsettled());  // bound reached: more may be waiting
}

}  // namespace
}  // namespace bm
