#include "master/digest_verifications.h"

#include <spdlog/spdlog.h>

namespace bm {

uint64_t DigestVerifications::Start(const std::string& worker_id, const BlockId& block) {
  if (asked_.size() >= kMaxInFlight) asked_.clear();
  const uint64_t request_id = request_ids_.Next();
  asked_.insert_or_assign(request_id, Asked{worker_id, block});
  return request_id;
}

bool DigestVerifications::Answered(const std::string& worker_id, const WorkerReply& reply) {
  auto asked = asked_.find(reply.id);
  if (asked == asked_.end()) return false;
  if (asked->second.worker_id == worker_id) {
    spdlog::warn("worker {} verified its copy of {} (reported with a mismatching digest): {}",
                 worker_id, asked->second.block.ToString(),
                 reply.verified ? *reply.verified : reply.failure.ToString());
    asked_.erase(asked);
  }
  return true;
}

}  // namespace bm
