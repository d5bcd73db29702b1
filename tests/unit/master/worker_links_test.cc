#include "master/worker_links.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/core/protocol.h"

namespace bm {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A worker's data port: a ROUTER on an inproc address that answers what the links send.
class FakeWorkerPort {
 public:
  FakeWorkerPort(zmq::context_t& context, std::string address)
      : address_(std::move(address)), router_(context, zmq::socket_type::router) {
    ConfigureServerSocket(router_, CurveKeys{});
    router_.bind(address_);
  }
  const std::string& address() const { return address_; }

  // The next request sent to the port (waiting up to 5 s), with the routing id to reply to.
  std::optional<IncomingMessage> Receive() {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, milliseconds(5000)) == 0) return std::nullopt;
    Result<IncomingMessage> received = ReceiveMessage(router_, /*has_routing_id=*/true);
    if (!received.ok()) return std::nullopt;
    return std::move(received).value();
  }

  void ReplyRemoved(const IncomingMessage& request, uint64_t removed) {
    capnp::MallocMessageBuilder message;
    proto::Reply::Builder reply = message.initRoot<proto::Reply>();
    reply.setId(const_cast<IncomingMessage&>(request).request().getId());
    reply.setRemoved(removed);
    ASSERT_TRUE(SendMessage(router_, &*request.routing_id(), message).ok());
  }

 private:
  std::string address_;
  zmq::socket_t router_;
};

Status SendRemoveBlocks(WorkerLinks& links, const std::string& worker_id, uint64_t id) {
  capnp::MallocMessageBuilder message;
  proto::Request::Builder request = message.initRoot<proto::Request>();
  request.setId(id);
  request.initRemoveBlocks().initBlockIds(1).set(0, "rdd_1_0");
  return links.Send(worker_id, message);
}

class WorkerLinksTest : public ::testing::Test {
 protected:
  void Link(const std::string& worker_id, const std::string& address, std::string key = "") {
    Result<zmq::socket_t> link = links_.Connect(address, key);
    ASSERT_TRUE(link.ok()) << link.status().ToString();
    links_.Add(worker_id, std::move(link).value(), key);
  }

  // Polls and drains the links as the master's loop does until `done` or 5 s have passed.
  template <typename Done>
  void DrainUntil(Done done, const WorkerLinks::ReplyHandler& handle) {
    const auto deadline = steady_clock::now() + std::chrono::seconds(5);
    while (!done() && steady_clock::now() < deadline) {
      std::vector<pollfd> fds;
      links_.AddPollFds(fds);
      ::poll(fds.data(), fds.size(), links_.unsettled() ? 0 : 100);
      links_.DrainReady(fds, handle);
    }
  }

  zmq::context_t context_;
  WorkerLinks links_{context_, CurveKeys{}, /*max_messages_per_wake=*/16};
};

TEST_F(WorkerLinksTest, SendsCommandsAndHandsBackTheWorkersReplies) {
  FakeWorkerPort w1(context_, "inproc://worker-links-w1");
  FakeWorkerPort w2(context_, "inproc://worker-links-w2");
  Link("w1", w1.address());
  Link("w2", w2.address());

  ASSERT_TRUE(SendRemoveBlocks(links_, "w2", 7).ok());
  std::optional<IncomingMessage> request = w2.Receive();
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->request().getId(), 7u);
  EXPECT_TRUE(request->request().isRemoveBlocks());
  w2.ReplyRemoved(*request, 1);

  std::vector<std::pair<std::string, uint64_t>> replies;
  DrainUntil([&] { return !replies.empty(); },
             [&](const std::string& worker_id, IncomingMessage& reply) {
               replies.emplace_back(worker_id, reply.reply().getId());
             });
  EXPECT_THAT(replies, ::testing::ElementsAre(std::make_pair(std::string("w2"), uint64_t{7})));
}

TEST_F(WorkerLinksTest, SendToAWorkerWithoutALinkIsNotFound) {
  EXPECT_EQ(SendRemoveBlocks(links_, "nobody", 1).code(), StatusCode::kNotFound);
  EXPECT_FALSE(links_.unsettled());
}

TEST_F(WorkerLinksTest, RemoveForgetsTheLinkAndTheKey) {
  FakeWorkerPort w1(context_, "inproc://worker-links-remove");
  Link("w1", w1.address());
  links_.Add("w1", std::move(links_.Connect(w1.address(), "")).value(), "the-key");
  EXPECT_TRUE(links_.Contains("w1"));
  EXPECT_EQ(links_.Key("w1"), "the-key");

  links_.Remove("w1");
  EXPECT_FALSE(links_.Contains("w1"));
  EXPECT_EQ(links_.Key("w1"), "");
  EXPECT_EQ(SendRemoveBlocks(links_, "w1", 2).code(), StatusCode::kNotFound);
}

TEST_F(WorkerLinksTest, EmptyKeyKeepsNoKey) {
  FakeWorkerPort w1(context_, "inproc://worker-links-nokey");
  Link("w1", w1.address(), "");
  EXPECT_EQ(links_.Key("w1"), "");
}

TEST_F(WorkerLinksTest, LinkSentOnIsUnsettledUntilDrained) {
  FakeWorkerPort w1(context_, "inproc://worker-links-settle");
  Link("w1", w1.address());
  EXPECT_FALSE(links_.unsettled());
  ASSERT_TRUE(SendRemoveBlocks(links_, "w1", 3).ok());
  EXPECT_TRUE(links_.unsettled());
  std::vector<pollfd> fds;
  links_.AddPollFds(fds);
  links_.DrainReady(
      fds, [](const std::string&, IncomingMessage&) { ADD_FAILURE() << "no reply was sent"; });
  EXPECT_FALSE(links_.unsettled());
}

TEST_F(WorkerLinksTest, UnsupportedAddressIsRefused) {
  EXPECT_FALSE(links_.Connect("nonsense://nowhere", "").ok());
}

}  // namespace
}  // namespace bm
