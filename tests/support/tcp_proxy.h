#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace bm::testing {

// Relays TCP connections from a free loopback port to `target_port` and records every byte
// that passes, both ways, so a test can look at what travels on the wire. One thread owns the
// sockets; Captured() may be called from any thread. The two directions of a connection pass
// independently, as on a real link: a receiver slow to read holds back only its own direction.
class TcpProxy {
 public:
  explicit TcpProxy(int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  int target_port() const { return target_port_; }
  // Everything relayed so far, both directions appended as it passed.
  std::string Captured() const;
  // From now on, flips one bit in the middle of the first occurrence of `pattern` within one
  // read of bytes relayed towards the target (a bad link, say), once. The capture records the
  // bytes as they arrived.
  void CorruptOnce(std::string pattern);
  // As CorruptOnce, in the bytes relayed back from the target (a reply on a bad link).
  void CorruptReplyOnce(std::string pattern);
  // Whether the flip happened.
  bool corrupted() const;
  // From now on, relays bytes towards the target at most this fast (a slow link), counted
  // over all connections; bytes back from the target still pass at once.
  void LimitRate(uint64_t bytes_per_second);

 private:
  struct Link;
  void Run();

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  // Guarded by mutex_. One string a read, never one growing string: reallocating tens of MiB
  // (and, under ThreadSanitizer, their shadow memory) stalled the relay long enough for a
  // client's heartbeats to time out.
  std::deque<std::string> captured_;
  std::string corrupt_pattern_;  // guarded by mutex_; empty: relay faithfully
  int corrupt_side_ = 0;         // guarded by mutex_; 0: towards the target, 1: back from it
  bool corrupted_ = false;       // guarded by mutex_
  std::atomic<uint64_t> rate_limit_{0};  // bytes per second towards the target; 0: none
  std::thread thread_;
};

}  // namespace bm::testing
