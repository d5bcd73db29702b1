#include "master/parked_requests.h"

#include <gtest/gtest.h>

#include <string>

namespace bm {
namespace {

std::string Text(const zmq::message_t& message) {
  return std::string(static_cast<const char*>(message.data()), message.size());
}

TEST(ParkedRequestsTest, TakeReturnsWhomToAnswerAndForgetsIt) {
  ParkedRequests parked;
  zmq::message_t client_a("client-a", 8);
  const uint64_t a = parked.Park(client_a, 7);
  const uint64_t b = parked.Park(zmq::message_t("client-b", 8), 8);
  EXPECT_NE(a, b);
  EXPECT_EQ(parked.size(), 2u);

  ParkedRequests::Parked taken = parked.Take(b);
  EXPECT_EQ(Text(taken.client), "client-b");
  EXPECT_EQ(taken.request_id, 8u);
  EXPECT_EQ(parked.size(), 1u);
  // The routing id was copied: the caller's message is untouched.
  EXPECT_EQ(Text(client_a), "client-a");
  EXPECT_EQ(parked.Take(a).request_id, 7u);
  EXPECT_EQ(parked.size(), 0u);
}

}  // namespace
}  // namespace bm
