#include "common/core/log_rate_limiter.h"

namespace bm {

std::optional<uint64_t> LogRateLimiter::Admit(TimePoint now) {
  if (last_written_ && now - *last_written_ < interval_) {
    ++held_back_;
    return std::nullopt;
  }
  last_written_ = now;
  const uint64_t held_back = held_back_;
  held_back_ = 0;
  return held_back;
}

}  // namespace bm
