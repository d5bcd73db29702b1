#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>
#include <thread>

#include "common/block_id.h"
#include "common/curve_keys.h"
#include "common/mutex.h"

namespace zmq {
class context_t;
}

namespace bm {

// Keeps a compute lease alive while the caller's compute function runs: a background thread
// sends renewCompute to the master every `interval` on its own socket (the caller's Client is
// busy computing and is not thread-safe). When the master answers that the lease is no longer
// held, renewing stops and lost() turns true; when the master does not answer, it keeps trying.
//
// Stops (and joins its thread) on destruction or Stop().
class LeaseRenewer {
 public:
  LeaseRenewer(zmq::context_t& context, std::string master_address, BlockId block, uint64_t token,
               std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
               ChannelSecurity security = {});
  ~LeaseRenewer();
  LeaseRenewer(const LeaseRenewer&) = delete;
  LeaseRenewer& operator=(const LeaseRenewer&) = delete;

  void Stop();
  // True once the master said the lease is no longer held by this token.
  bool lost() const { return lost_.load(); }

 private:
  void Run(zmq::context_t& context, std::string master_address, ChannelSecurity security,
           std::chrono::milliseconds timeout);

  const BlockId block_;
  const uint64_t token_;
  const std::chrono::milliseconds interval_;
  std::atomic<bool> lost_{false};
  Mutex mutex_;
  std::condition_variable wake_;  // with mutex_
  bool stop_ BM_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace bm
