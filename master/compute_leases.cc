#include "master/compute_leases.h"

#include <algorithm>
#include <random>
#include <utility>

namespace bm {

ComputeLeases::ComputeLeases(const Clock& clock) : clock_(clock) {
  std::random_device random;
  next_token_ = (static_cast<uint64_t>(random()) << 32) | random();
}

std::optional<uint64_t> ComputeLeases::Acquire(Request request) {
  auto it = leases_.find(request.block);
  if (it == leases_.end()) {
    const BlockId block = request.block;
    Lease lease = NewLease(request);
    const uint64_t token = lease.token;
    leases_.emplace(block, std::move(lease));
    return token;
  }
  it->second.waiters.push_back(std::move(request));
  return std::nullopt;
}

Status ComputeLeases::Renew(const BlockId& block, uint64_t token) {
  auto it = leases_.find(block);
  if (it == leases_.end() || it->second.token != token) {
    return AbortedError("no compute lease on " + block.ToString() +
                        " is held with this token (it expired or the block was stored)");
  }
  it->second.expires = clock_.Now() + it->second.length;
  return Status::Ok();
}

bool ComputeLeases::Holds(const BlockId& block, uint64_t token) const {
  auto it = leases_.find(block);
  return it != leases_.end() && it->second.token == token && clock_.Now() < it->second.expires;
}

std::vector<ComputeLeases::Answer> ComputeLeases::Release(const BlockId& block, uint64_t token) {
  std::vector<Answer> answers;
  auto it = leases_.find(block);
  if (it == leases_.end() || it->second.token != token) return answers;
  if (std::optional<Answer> grant = HandOver(block, it->second)) {
    answers.push_back(std::move(*grant));
  } else {
    leases_.erase(it);
  }
  return answers;
}

std::vector<ComputeLeases::Answer> ComputeLeases::Stored(const BlockId& block) {
  std::vector<Answer> answers;
  auto it = leases_.find(block);
  if (it == leases_.end()) return answers;
  for (Request& waiter : it->second.waiters) {
    answers.push_back(
        Answer{.kind = Answer::Kind::kStored, .waiter = waiter.waiter, .block = block});
  }
  leases_.erase(it);
  return answers;
}

std::vector<ComputeLeases::Answer> ComputeLeases::Expire() {
  const TimePoint now = clock_.Now();
  std::vector<Answer> answers;
  for (auto it = leases_.begin(); it != leases_.end();) {
    Lease& lease = it->second;
    // Waiters whose wait is over go back to their clients, which ask again.
    for (auto waiter = lease.waiters.begin(); waiter != lease.waiters.end();) {
      if (waiter->wait_until > now) {
        ++waiter;
        continue;
      }
      answers.push_back(Answer{.kind = Answer::Kind::kBusy,
                               .waiter = waiter->waiter,
                               .block = it->first,
                               .holder = lease.holder,
                               .lease_left = std::max(Duration::zero(), lease.expires - now)});
      waiter = lease.waiters.erase(waiter);
    }
    if (lease.expires > now) {
      ++it;
      continue;
    }
    if (std::optional<Answer> grant = HandOver(it->first, lease)) {
      answers.push_back(std::move(*grant));
      ++it;
    } else {
      it = leases_.erase(it);
    }
  }
  return answers;
}

std::vector<uint64_t> ComputeLeases::TakeAllWaiters() {
  std::vector<uint64_t> waiters;
  for (auto& [block, lease] : leases_) {
    for (const Request& waiter : lease.waiters) waiters.push_back(waiter.waiter);
    lease.waiters.clear();
  }
  return waiters;
}

std::optional<TimePoint> ComputeLeases::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const auto& [block, lease] : leases_) {
    next = next ? std::min(*next, lease.expires) : lease.expires;
    for (const Request& waiter : lease.waiters) next = std::min(*next, waiter.wait_until);
  }
  return next;
}

size_t ComputeLeases::waiter_count() const {
  size_t count = 0;
  for (const auto& [block, lease] : leases_) count += lease.waiters.size();
  return count;
}

std::optional<ComputeLeases::Answer> ComputeLeases::HandOver(const BlockId& block, Lease& lease) {
  if (lease.waiters.empty()) return std::nullopt;
  Request next = std::move(lease.waiters.front());
  lease.waiters.pop_front();
  Lease handed = NewLease(next);
  handed.waiters = std::move(lease.waiters);
  lease = std::move(handed);
  return Answer{.kind = Answer::Kind::kGranted,
                .waiter = next.waiter,
                .block = block,
                .token = lease.token,
                .holder = lease.holder};
}

std::vector<ComputeLeases::HeldLease> ComputeLeases::Held() const {
  std::vector<HeldLease> held;
  held.reserve(leases_.size());
  for (const auto& [block, lease] : leases_) {
    held.push_back({block, lease.token, lease.holder, lease.length});
  }
  return held;
}

void ComputeLeases::Restore(const HeldLease& held) {
  Lease lease;
  lease.token = held.token;
  lease.holder = held.holder;
  lease.length = held.length;
  lease.expires = clock_.Now() + held.length;
  leases_.insert_or_assign(held.block, std::move(lease));
}

ComputeLeases::Lease ComputeLeases::NewLease(const Request& request) {
  Lease lease;
  lease.token = next_token_++;
  lease.holder = request.holder;
  lease.length = request.lease;
  lease.expires = clock_.Now() + request.lease;
  return lease;
}

}  // namespace bm
