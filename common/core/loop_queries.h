#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "blockmgr/status.h"
#include "common/core/mutex.h"

namespace bm {

// An eventfd that wakes an event loop from other threads. Owns the fd.
class WakeFd {
 public:
  static Result<WakeFd> Create();
  WakeFd(WakeFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  WakeFd& operator=(WakeFd&&) = delete;
  ~WakeFd();

  int fd() const { return fd_; }
  void Wake() const;
  // Clears the wake-up (the loop calls this before handling what woke it).
  void Clear() const;

 private:
  explicit WakeFd(int fd) : fd_(fd) {}
  int fd_;
};

// Queries from other threads (HTTP handlers) answered on an event loop's thread, so that the
// loop's state is never shared. A query gets read-only access to a `View` of the loop's state
// and must do bounded work; the asking thread waits for the answer with a deadline, and the loop
// never waits for the asking thread.
//
// Thread-safety: Ask() from any thread; Serve() from the loop thread only, when wake_fd() is
// readable.
template <typename View>
class LoopQueries {
 public:
  static constexpr std::chrono::milliseconds kAnswerTimeout{3000};
  static constexpr size_t kMaxWaiting = 64;

  static Result<std::unique_ptr<LoopQueries>> Create() {
    BM_ASSIGN_OR_RETURN(WakeFd wake, WakeFd::Create());
    return std::unique_ptr<LoopQueries>(new LoopQueries(std::move(wake)));
  }

  int wake_fd() const { return wake_.fd(); }

  // Runs `query` on the loop thread and returns its result. kUnavailable when the loop does not
  // answer in time (it is stopped, busy or still starting) or too many queries are waiting.
  template <typename T>
  Result<T> Ask(std::function<T(const View&)> query) {
    // Shared with the queued task: the loop may answer after this thread gave up waiting.
    auto promise = std::make_shared<std::promise<T>>();
    std::future<T> answer = promise->get_future();
    {
      MutexLock lock(mutex_);
      if (tasks_.size() >= kMaxWaiting) {
        return UnavailableError("too many status queries are waiting for the event loop");
      }
      tasks_.push_back([promise, query = std::move(query)](const View& view) {
        promise->set_value(query(view));
      });
    }
    wake_.Wake();
    if (answer.wait_for(kAnswerTimeout) != std::future_status::ready) {
      return UnavailableError("the event loop did not answer within " +
                              std::to_string(kAnswerTimeout.count()) + " ms");
    }
    return answer.get();
  }

  void Serve(const View& view) {
    wake_.Clear();
    std::deque<std::function<void(const View&)>> tasks;
    {
      MutexLock lock(mutex_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task(view);
  }

 private:
  explicit LoopQueries(WakeFd wake) : wake_(std::move(wake)) {}

  const WakeFd wake_;
  Mutex mutex_;
  std::deque<std::function<void(const View&)>> tasks_ BM_GUARDED_BY(mutex_);
};

}  // namespace bm
