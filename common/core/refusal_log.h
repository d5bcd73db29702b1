#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace bm {

// Logs refusals (of handshakes, connections, registrations) at most once per interval, so a
// peer hammering a server cannot flood its log: the refusals in between are counted into the
// next line. Not thread-safe: owned by the thread that refuses.
class RefusalLog {
 public:
  explicit RefusalLog(std::chrono::steady_clock::duration interval = std::chrono::seconds(1))
      : interval_(interval) {}

  // Logs `what` as a warning now, or counts it when a line went out less than an interval ago.
  void Warn(const std::string& what);

 private:
  const std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point last_line_{};
  uint64_t not_logged_ = 0;
};

}  // namespace bm
