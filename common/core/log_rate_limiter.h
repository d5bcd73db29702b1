#pragma once

#include <cstdint>
#include <optional>

#include "common/core/clock.h"

namespace bm {

// Decides which lines of a noisy source of log lines get written: the first, then at most one
// per `interval`; the lines held back in between are counted, and the next line written says
// how many there were. So a source that fails many times a second for as long as an outage
// lasts (a ZooKeeper client reconnecting, a peer hammering a server) writes a line per
// interval, and the first failure is never the one held back.
//
// Pure: the caller passes the time. Not thread-safe: owned by one thread, or guarded by the
// owner's lock.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(Duration interval) : interval_(interval) {}

  // A line at `now`: nullopt when it is to be held back (it is counted), else how many lines
  // were held back since the last one written (0 for the first).
  std::optional<uint64_t> Admit(TimePoint now);

 private:
  const Duration interval_;
  std::optional<TimePoint> last_written_;
  uint64_t held_back_ = 0;
};

}  // namespace bm
