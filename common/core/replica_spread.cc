#include "common/core/replica_spread.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

namespace bm {

std::vector<size_t> SpreadReplicas(std::span<const ReplicaSite> candidates,
                                   std::span<const ReplicaSite> holders, size_t count) {
  std::set<std::string> racks, hosts, workers;
  auto occupy = [&](const ReplicaSite& site) {
    racks.insert(site.rack);
    hosts.insert(site.host);
    workers.insert(site.worker_id);
  };
  for (const ReplicaSite& holder : holders) occupy(holder);

  std::vector<bool> picked(candidates.size(), false);
  std::vector<size_t> order;
  // Each pick takes the first candidate satisfying the strictest rule any candidate meets.
  const std::vector<std::function<bool(const ReplicaSite&)>> rules = {
      [&](const ReplicaSite& s) { return !racks.contains(s.rack); },
      [&](const ReplicaSite& s) { return !hosts.contains(s.host); },
      [&](const ReplicaSite&) { return true; },
  };
  while (order.size() < count) {
    std::optional<size_t> pick;
    for (const auto& rule : rules) {
      for (size_t i = 0; i < candidates.size() && !pick; ++i) {
        if (!picked[i] && !workers.contains(candidates[i].worker_id) && rule(candidates[i])) {
          pick = i;
        }
      }
      if (pick) break;
    }
    if (!pick) break;
    picked[*pick] = true;
    occupy(candidates[*pick]);
    order.push_back(*pick);
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!picked[i] && !workers.contains(candidates[i].worker_id)) order.push_back(i);
  }
  return order;
}

}  // namespace bm
