#pragma once

// How often one key may register a worker, so that a storm of registrations from one key (a
// worker stuck in a restart loop, or a stolen worker key) cannot keep the master busy
// forgetting and re-indexing that worker, re-connecting to it and journaling it, while the
// other workers and the clients wait.
//
// A token bucket per key: a key may register `per_minute` times at once, and once more every
// 60 / per_minute seconds after. A healthy worker registers once when it starts and once
// after each master restart or drop, far below any sensible limit.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/refusal_log.h"
#include "common/security/curve_keys.h"

namespace bm {

// Not thread-safe: owned by the master's loop.
class RegistrationLimit {
 public:
  // per_minute 0: no limit. `clock` is borrowed and must outlive the limit.
  RegistrationLimit(size_t per_minute, const Clock& clock);
  RegistrationLimit(const RegistrationLimit&) = delete;
  RegistrationLimit& operator=(const RegistrationLimit&) = delete;

  // A registration by `peer`: Ok (and counted), or kUnavailable naming when to retry (counted
  // and logged, rate-limited).
  Status Admit(const PeerIdentity& peer);

  uint64_t refused() const { return refused_; }
  // Keys with a bucket not yet full again (kept to forget full ones; bounded by the keys that
  // registered within the last minute, which the allow-list bounds).
  size_t tracked_keys() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    TimePoint updated;
  };

  const double capacity_;
  const Duration refill_interval_;  // time for one token to come back
  const Clock& clock_;
  std::unordered_map<std::string, Bucket> buckets_;  // by Z85 key
  TimePoint next_sweep_{};                           // when full buckets are next forgotten
  uint64_t refused_ = 0;
  RefusalLog log_;
};

}  // namespace bm
