#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace bm {

// SIGINT/SIGTERM (and SIGHUP) handling for a server process. Construct it first thing in main(),
// before any other thread starts: it blocks both signals in the calling thread, so every thread
// started later (ZeroMQ's and RocksDB's included) inherits the mask, and one waiting thread takes
// them synchronously instead of a handler interrupting arbitrary code. Not thread-safe; owned by
// main().
class ShutdownSignals {
 public:
  ShutdownSignals();
  ~ShutdownSignals() { StopWaiting(); }
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // On SIGHUP the waiting thread calls `on_reload` (the allow-list reload) and goes on waiting.
  // Call before CallOnSignal(); without it SIGHUP is ignored (a server does not die of it).
  void CallOnReload(std::function<void()> on_reload) { on_reload_ = std::move(on_reload); }
  // Starts the waiting thread: on SIGINT or SIGTERM it logs and calls `on_signal` (typically
  // the server's thread-safe Stop()). Call once.
  void CallOnSignal(std::function<void()> on_signal);
  // Ends the waiting thread (waking it if no signal came) so the callback cannot run after
  // this returns. Call it before destroying what the callback uses.
  void StopWaiting();

 private:
  sigset_t signals_;
  std::function<void()> on_reload_;
  std::thread waiter_;
  std::atomic<bool> woken_by_us_ = false;
};

}  // namespace bm
