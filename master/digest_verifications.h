#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "blockmgr/block_id.h"
#include "master/worker_request_ids.h"
#include "master/worker_requests.h"

namespace bm {

// The verifyBlock commands the master sent after a worker reported a copy with a digest other
// than its version's (MismatchedCopy), kept by request id until the worker answers, so that the
// answer is logged next to the copy it is about. Bounded: answers that never come (a worker
// gone) must not pile up, so past kMaxInFlight the oldest are forgotten all at once.
//
// Not thread-safe: owned by the master's loop, which sends the commands. The request ids are
// borrowed and must outlive it.
class DigestVerifications {
 public:
  static constexpr size_t kMaxInFlight = 1024;

  explicit DigestVerifications(WorkerRequestIds& request_ids) : request_ids_(request_ids) {}

  // The request id of a verifyBlock of `block` to send to `worker_id`.
  uint64_t Start(const std::string& worker_id, const BlockId& block);
  // Whether `reply` (from `worker_id`) has the id of a verifyBlock; its worker's answer is
  // logged and forgotten (an id from another worker is not the one asked, and is ignored).
  bool Answered(const std::string& worker_id, const WorkerReply& reply);

  size_t in_flight() const { return asked_.size(); }

 private:
  struct Asked {
    std::string worker_id;
    BlockId block;
  };

  WorkerRequestIds& request_ids_;
  std::unordered_map<uint64_t, Asked> asked_;  // by request id
};

}  // namespace bm
