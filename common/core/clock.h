#pragma once

#include <chrono>

namespace bm {

using Duration = std::chrono::steady_clock::duration;
using TimePoint = std::chrono::steady_clock::time_point;

// Time as components see it. Passed in through constructors so tests can advance time instead
// of sleeping.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

// A clock that moves only when told. Not thread-safe.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return now_; }
  void Advance(Duration d) { now_ += d; }

 private:
  TimePoint now_{};
};

}  // namespace bm
