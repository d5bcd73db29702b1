#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

namespace bm::testing {

// Relays TCP connections from a free loopback port to `target_port` and records every byte
// that passes, both ways, so a test can look at what travels on the wire. One thread owns the
// sockets; Captured() may be called from any thread.
class TcpProxy {
 public:
  explicit TcpProxy(int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  // Everything relayed so far, both directions appended as it passed.
  std::string Captured() const;

 private:
  void Run();

  int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::string captured_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace bm::testing
