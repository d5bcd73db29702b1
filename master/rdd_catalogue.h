#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/protocol.h"
#include "master/journal.h"
#include "master/master_status.h"

namespace bm {

// What datasets registered about their RDDs (registerRdd): a name, a storage level and a
// partition count per RDD id, kept until the RDD is removed (removeRdd). A dataset persisted
// again must be the same dataset: its cached blocks are found by RDD id and partition alone, so
// another name, partition count or level under the same id would silently serve the old
// dataset's partitions (Spark refuses a level change the same way).
//
// A component of the master's loop: each change returns what the loop must journal; it touches
// no socket or journal itself. Not thread-safe: owned by the loop's thread.
class RddCatalogue {
 public:
  static constexpr size_t kMaxNameBytes = 256;
  // Descriptions are small, but a client registering ids in a loop must not grow the master
  // without bound.
  static constexpr size_t kMaxRdds = 100000;

  // registerRdd: the description to journal when it is new; nullopt when the same one was
  // registered before. kInvalidArgument for another description under a known id or a name
  // too long; kOutOfSpace when kMaxRdds are described already.
  Result<std::optional<JournaledRdd>> Register(proto::RegisterRdd::Reader request);
  // removeRdd: whether the RDD was described (then its forgetting is journaled).
  bool Forget(uint64_t rdd_id) { return descriptions_.erase(rdd_id) > 0; }
  // Loads the journal's descriptions (before the loop runs).
  void Restore(std::vector<JournaledRdd> rdds);

  const std::map<uint64_t, RddDescription>& descriptions() const { return descriptions_; }
  size_t size() const { return descriptions_.size(); }

 private:
  std::map<uint64_t, RddDescription> descriptions_;  // by RDD id
};

}  // namespace bm
