#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace bm {

// Where a copy of a block is or could be, as far as spreading copies is concerned.
struct ReplicaSite {
  std::string worker_id;
  std::string host;  // the worker's host label, or the host of its address when it has none
  std::string rack;  // empty when the worker declared none
};

// Picks up to `count` of `candidates` for new copies of a block whose existing copies are on
// `holders`, the way HDFS spreads replicas: each pick is the first candidate (candidates are
// in the caller's order of preference, e.g. most free memory first) on a rack no copy is on
// yet; failing that, on a host no copy is on yet; failing that, any worker without a copy.
// So copies survive the loss of a rack, then of a host, before they share one.
//
// Returns indexes into `candidates`: the picks in pick order, then every other candidate in
// its original order (fall-backs for picks that fail). Candidates that already hold a copy
// are left out.
std::vector<size_t> SpreadReplicas(std::span<const ReplicaSite> candidates,
                                   std::span<const ReplicaSite> holders, size_t count);

}  // namespace bm
