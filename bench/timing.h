#pragma once

#include <chrono>
#include <cstdint>

#include "blockmgr/status.h"

namespace bm::bench {

// How many operations ran in how long.
struct Timed {
  uint64_t ops = 0;
  double seconds = 0;

  double per_second() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

// How long one measurement runs: at least `min_seconds` and at least `min_ops` operations,
// whichever ends later. Time-bounded rather than count-bounded so slow and fast peers both
// get a stable figure within the run's time budget.
struct Duration {
  double min_seconds = 1;
  uint64_t min_ops = 3;
};

// Calls `op` (returning Status) until `duration` is met; stops at the first failure.
template <typename Op>
Result<Timed> RunTimed(const Duration& duration, Op&& op) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Timed timed;
  while (true) {
    Status status = op();
    if (!status.ok()) return status;
    ++timed.ops;
    timed.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (timed.seconds >= duration.min_seconds && timed.ops >= duration.min_ops) return timed;
  }
}

}  // namespace bm::bench
