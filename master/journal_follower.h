#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/security/curve_keys.h"
#include "master/journal.h"
#include "master/leadership.h"

namespace zmq {
class context_t;
}

namespace bm {

// A standby master's side of journal replication (PROTOCOL.md, "Standby masters"): fetches
// the leader's journal records (fetchJournal, a long poll) and applies them to this master's
// own journal, so that the journal holds the leader's metadata when this master is elected.
//
// Threads: runs its own thread, which owns the journal from Start() until Stop() returns; the
// master's loop takes the journal back then (and loads it when it leads). The counters are
// atomics, read by the loop for masterInfo and metrics.
class JournalFollower {
 public:
  struct Options {
    std::string standby_id;    // this master's id, as the leader lists its standbys
    ChannelSecurity security;  // this master's keys, trusting the leader's (the cluster's) key
    // How long the leader may hold a fetch with nothing new, and how much longer the answer
    // may take: together they bound how long Stop() waits (and so a promotion) when the
    // leader stopped answering without closing its connection.
    std::chrono::milliseconds wait{100};
    std::chrono::milliseconds answer_slack{200};
  };
  // Starts following whoever `leadership` names as leader (until Stop()).
  static std::unique_ptr<JournalFollower> Start(zmq::context_t& context, Options options,
                                                MasterJournal& journal,
                                                const Leadership& leadership);
  ~JournalFollower();  // Stop()s
  JournalFollower(const JournalFollower&) = delete;
  JournalFollower& operator=(const JournalFollower&) = delete;

  // Returns once the thread has let go of the journal (at most about one fetch's wait).
  void Stop();

  // The last position applied, and whether it reached the leader's head (every record the
  // leader had written) as of the leader's last answer.
  uint64_t epoch() const { return epoch_.load(); }
  uint64_t sequence() const { return sequence_.load(); }
  bool caught_up() const { return caught_up_.load(); }
  uint64_t snapshots() const { return snapshots_.load(); }

 private:
  JournalFollower(zmq::context_t& context, Options options, MasterJournal& journal,
                  const Leadership& leadership);
  void Run();

  zmq::context_t& context_;
  const Options options_;
  MasterJournal& journal_;
  const Leadership& leadership_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> sequence_{0};
  std::atomic<bool> caught_up_{false};
  std::atomic<uint64_t> snapshots_{0};
  std::thread thread_;
};

}  // namespace bm
