#include "common/server/shutdown_signals.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

namespace bm {

ShutdownSignals::ShutdownSignals() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGHUP);
  // A process started in the background by a shell inherits SIGINT as ignored, and an ignored
  // signal is discarded even while blocked: restore the default so sigwait() sees it.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

void ShutdownSignals::StopWaiting() {
  if (!waiter_.joinable()) return;
  // The server stopped on its own: wake the waiter (the signal is blocked, so it only ends
  // sigwait) and tell it not to call back.
  woken_by_us_ = true;
  pthread_kill(waiter_.native_handle(), SIGTERM);
  waiter_.join();
}

void ShutdownSignals::CallOnSignal(std::function<void()> on_signal) {
  waiter_ = std::thread([this, on_signal = std::move(on_signal)] {
    int signal = 0;
    while (true) {
      sigwait(&signals_, &signal);
      if (woken_by_us_) return;
      if (signal != SIGHUP) break;
      spdlog::info("SIGHUP: reloading");
      if (on_reload_) on_reload_();
    }
    spdlog::info("signal {}: shutting down", signal);
    on_signal();
  });
}

}  // namespace bm
