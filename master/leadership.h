#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bm {

// What a master's loop needs to know of the election it runs in (master/leader_election.h
// implements it over ZooKeeper; tests use a fake): whether this master leads, in which epoch,
// and who leads otherwise.
struct LeadershipView {
  // This master is the leader of `epoch`, and may act as one: it holds its ZooKeeper session.
  bool leader = false;
  // The newest epoch known: the leader's (this master's own when it leads); 0 = none yet.
  uint64_t epoch = 0;
  std::string leader_id{};       // empty while no leader is known
  std::string leader_address{};  // its client address, e.g. tcp://10.0.0.5:7700
  // Leader: the standbys ZooKeeper lists as in sync in this epoch (only they may lead next),
  // as last published. nullopt: the election keeps no such list (then acknowledgements wait
  // only for the standbys the leader itself counts in sync).
  std::optional<std::vector<std::string>> in_sync_published{};
};

// Thread-safe: Current() may be called from any thread, and the election calls the observer it
// was given (the master's wake-up) whenever what Current() returns changes.
class Leadership {
 public:
  virtual ~Leadership() = default;
  virtual LeadershipView Current() const = 0;
  // Leader: asks the election to publish these standbys as the in-sync ones (asynchronously;
  // Current().in_sync_published shows it done). No-op where there is no such list.
  virtual void PublishInSync(std::vector<std::string> standbys) { (void)standbys; }
};

}  // namespace bm
