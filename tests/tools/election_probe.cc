// bm-election-probe: one candidate of the masters' leader election in its own process, for the
// tests that kill -9 or SIGSTOP a leader.
//
//   bm-election-probe --zookeeper HOST:PORT/CHROOT --id ID --address ADDR [--session-ms N]
//
// Prints a line "<role> <epoch> <leader id>" (leader id "-" when none) each time what the
// election says changes, flushed at once; after a SIGCONT, the first look at the election is
// printed as "resumed <role> <epoch> <leader id>", changed or not. Runs until killed; SIGTERM
// resigns.

#include <signal.h>

#include <CLI/CLI.hpp>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "master/leader_election.h"

namespace {
volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_resumed = 0;
void OnSignal(int) { g_stop = 1; }
void OnContinue(int) { g_resumed = 1; }
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one leader election candidate"};
  bm::ElectionOptions options;
  int session_ms = 2000;
  app.add_option("--zookeeper", options.zookeeper)->required();
  app.add_option("--id", options.candidate_id)->required();
  app.add_option("--address", options.address)->required();
  app.add_option("--session-ms", session_ms);
  CLI11_PARSE(app, argc, argv);
  options.session_timeout = std::chrono::milliseconds(session_ms);
  signal(SIGTERM, OnSignal);
  signal(SIGCONT, OnContinue);

  std::mutex mutex;
  std::condition_variable changed;
  bool poked = false;
  auto election = bm::LeaderElection::Start(options, [&] {
    std::lock_guard lock(mutex);
    poked = true;
    changed.notify_one();
  });
  if (!election.ok()) {
    std::fprintf(stderr, "%s\n", election.status().ToString().c_str());
    return 2;
  }
  std::optional<bm::ElectionSnapshot> printed;
  while (!g_stop) {
    {
      // Also wakes on its own: Current() can change without a poke (a leader lease lapsing).
      std::unique_lock lock(mutex);
      changed.wait_for(lock, std::chrono::milliseconds(20), [&] { return poked; });
      poked = false;
    }
    bm::ElectionSnapshot now = (*election)->Current();
    const bool resumed = g_resumed;
    g_resumed = 0;
    if (printed && *printed == now && !resumed) continue;
    std::printf("%s%s %llu %s\n", resumed ? "resumed " : "", bm::ElectionRoleName(now.role),
                static_cast<unsigned long long>(now.epoch),
                now.leader_id.empty() ? "-" : now.leader_id.c_str());
    std::fflush(stdout);
    printed = now;
  }
  (*election)->Resign();
  return 0;
}
