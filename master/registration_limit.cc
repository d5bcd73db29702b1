#include "master/registration_limit.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace bm {

RegistrationLimit::RegistrationLimit(size_t per_minute, const Clock& clock)
    : capacity_(static_cast<double>(per_minute)),
      refill_interval_(per_minute == 0 ? Duration::zero()
                                       : Duration(std::chrono::minutes(1)) /
                                             static_cast<Duration::rep>(per_minute)),
      clock_(clock) {}

Status RegistrationLimit::Admit(const PeerIdentity& peer) {
  if (capacity_ == 0) return Status::Ok();
  const TimePoint now = clock_.Now();
  // Full buckets are forgotten, once a minute: a key seen again later starts full anyway.
  if (now >= next_sweep_) {
    next_sweep_ = now + std::chrono::minutes(1);
    std::erase_if(buckets_, [&](const auto& entry) {
      const double refilled = static_cast<double>((now - entry.second.updated).count()) /
                              static_cast<double>(refill_interval_.count());
      return entry.second.tokens + refilled >= capacity_;
    });
  }
  auto [found, fresh] = buckets_.try_emplace(peer.public_key, Bucket{capacity_, now});
  Bucket& bucket = found->second;
  if (!fresh) {
    const double refilled = static_cast<double>((now - bucket.updated).count()) /
                            static_cast<double>(refill_interval_.count());
    bucket.tokens = std::min(capacity_, bucket.tokens + refilled);
    bucket.updated = now;
  }
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return Status::Ok();
  }
  ++refused_;
  const auto wait =
      std::chrono::ceil<std::chrono::milliseconds>(Duration(static_cast<Duration::rep>(
          (1 - bucket.tokens) * static_cast<double>(refill_interval_.count()))));
  const std::string why = "key '" + peer.name + "' registered " +
                          std::to_string(static_cast<uint64_t>(capacity_)) +
                          " times within a minute, the most one key may";
  log_.Warn("refused a registration: " + why);
  return UnavailableError(why + " (--max-registrations-per-key); retry in " +
                          std::to_string(wait.count()) + " ms");
}

}  // namespace bm
