#include "common/core/loop_queries.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace bm {
namespace {

// The loop's state as queries see it.
struct CounterView {
  const int& value;
};

// A stand-in event loop: polls the wake fd like the servers do and answers queries between
// changes to its own state.
class FakeLoop {
 public:
  explicit FakeLoop(LoopQueries<CounterView>& queries) : queries_(queries) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeLoop() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void Run() {
    int value = 0;  // owned by this thread only
    while (!stop_.load()) {
      ++value;
      pollfd fd{queries_.wake_fd(), POLLIN, 0};
      if (::poll(&fd, 1, 10) > 0) queries_.Serve(CounterView{value});
    }
  }

  LoopQueries<CounterView>& queries_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(LoopQueriesTest, QueriesFromManyThreadsAreAnsweredOnTheLoop) {
  auto queries = LoopQueries<CounterView>::Create().value();
  FakeLoop loop(*queries);
  std::vector<std::thread> askers;
  std::atomic<int> answered{0};
  for (int t = 0; t < 4; ++t) {
    askers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        Result<int> value = queries->Ask<int>([](const CounterView& view) { return view.value; });
        if (value.ok() && *value > 0) ++answered;
      }
    });
  }
  for (std::thread& asker : askers) asker.join();
  EXPECT_EQ(answered.load(), 200);
}

TEST(LoopQueriesTest, AskFailsAsUnavailableWhenNoLoopServes) {
  auto queries = LoopQueries<CounterView>::Create().value();
  Result<int> value = queries->Ask<int>([](const CounterView& view) { return view.value; });
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), StatusCode::kUnavailable);
  // A loop that comes later still runs the abandoned query harmlessly.
  int state = 5;
  queries->Serve(CounterView{state});
}

}  // namespace
}  // namespace bm
