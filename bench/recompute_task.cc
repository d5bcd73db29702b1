// Workload 14's client: get-or-compute over partitions whose compute costs are skewed, read in
// a Zipf-like order, on a cluster whose memory holds half of them (docs/eviction.md "Eviction").

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "bench/tasks.h"
#include "blockmgr/client.h"

namespace bm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The access pattern and costs, the same for every run with the same parameters (so both
// policies see the very same sequence).
struct RecomputeWorkload {
  std::vector<BlockId> blocks;       // partition -> its block
  std::vector<double> cost_seconds;  // partition -> what computing it takes
  std::vector<uint32_t> accesses;    // the partitions read, in order
};

RecomputeWorkload MakeWorkload(const Json& task) {
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const uint32_t per_rdd = task.value("partitions_per_rdd", 8u);
  const uint64_t rdd_base = task.at("rdd").get<uint64_t>();
  const double cheap = task.at("cheap_seconds").get<double>();
  const double expensive = cheap * task.value("expensive_factor", 50.0);
  const double expensive_share = task.value("expensive_share", 0.1);
  const double zipf = task.value("zipf", 0.9);
  const uint64_t count = task.at("accesses").get<uint64_t>();
  std::mt19937_64 random(task.value("seed", uint64_t{42}));

  RecomputeWorkload w;
  for (uint32_t p = 0; p < partitions; ++p) {
    // Many RDDs: blocks of the RDD being stored are never evicted for it.
    w.blocks.push_back(BlockId::Rdd(rdd_base + p / per_rdd, p % per_rdd));
  }
  // Which partitions are expensive is independent of how popular they are.
  std::vector<uint32_t> order(partitions);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), random);
  w.cost_seconds.assign(partitions, cheap);
  const auto expensive_count = static_cast<uint32_t>(std::lround(partitions * expensive_share));
  for (uint32_t i = 0; i < expensive_count; ++i) w.cost_seconds[order[i]] = expensive;
  // Zipf: the partition of popularity rank r is read with weight 1 / (r + 1)^s; ranks are
  // dealt to partitions at random.
  std::vector<uint32_t> by_rank(partitions);
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  std::shuffle(by_rank.begin(), by_rank.end(), random);
  std::vector<double> weights(partitions);
  for (uint32_t r = 0; r < partitions; ++r) weights[r] = 1.0 / std::pow(r + 1.0, zipf);
  std::discrete_distribution<uint32_t> rank(weights.begin(), weights.end());
  for (uint64_t i = 0; i < count; ++i) w.accesses.push_back(by_rank[rank(random)]);
  return w;
}

// Sleeps for the cost: a computation's wall time, without taking a core from the servers the
// run measures on a shared machine.
Result<std::vector<std::byte>> ComputePartition(uint32_t partition, double seconds, uint64_t size) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return std::vector<std::byte>(size, static_cast<std::byte>(partition));
}

}  // namespace

Result<Json> BlockmgrRecomputeTask(const Json& task) {
  ClientOptions options;
  options.master_address = task.at("master").get<std::string>();
  options.request_timeout = std::chrono::milliseconds(task.value("timeout_ms", 30000));
  // Over TCP: a same-host read pins the block while mapped, which is not what is measured.
  options.local_reads = false;
  const uint64_t size = task.at("size").get<uint64_t>();
  const StorageLevel level = StorageLevel::kMemoryOnly;
  const RecomputeWorkload w = MakeWorkload(task);
  // The first `warmup` accesses fill the cache (their misses are cold misses, the same under
  // any policy); the rest are measured.
  const uint64_t warmup = task.value("warmup", uint64_t{0});
  Client client(options);

  double recompute_seconds = 0;
  uint64_t computes = 0;
  uint64_t expensive_computes = 0;
  const double cheap = task.at("cheap_seconds").get<double>();
  Clock::time_point measured_from = Clock::now();
  for (uint64_t i = 0; i < w.accesses.size(); ++i) {
    if (i == warmup) {
      client.TakeCounters();
      recompute_seconds = 0;
      computes = expensive_computes = 0;
      measured_from = Clock::now();
    }
    const uint32_t p = w.accesses[i];
    Result<std::vector<std::byte>> got = client.GetOrCompute(w.blocks[p], level, [&] {
      const Clock::time_point started = Clock::now();
      Result<std::vector<std::byte>> bytes = ComputePartition(p, w.cost_seconds[p], size);
      recompute_seconds += std::chrono::duration<double>(Clock::now() - started).count();
      ++computes;
      if (w.cost_seconds[p] > cheap) ++expensive_computes;
      return bytes;
    });
    if (!got.ok()) return got.status();
    if (got->size() != size || (size > 0 && (*got)[0] != static_cast<std::byte>(p))) {
      return InternalError("get-or-compute of " + w.blocks[p].ToString() +
                           " returned other bytes than its partition's");
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - measured_from).count();
  const CacheCounters counters = client.TakeCounters();
  // Leave the cluster empty for the next run.
  std::set<uint64_t> rdds;
  for (const BlockId& block : w.blocks) rdds.insert(*block.rdd_id());
  for (uint64_t rdd : rdds) BM_RETURN_IF_ERROR(client.RemoveRdd(rdd).status());
  const uint64_t calls = counters.hits() + counters.misses;
  return Json{{"recompute_seconds", recompute_seconds},
              {"wall_seconds", wall},
              {"computes", computes},
              {"expensive_computes", expensive_computes},
              {"store_failures", counters.store_failures},
              {"hit_ratio", calls > 0 ? static_cast<double>(counters.hits()) / calls : 0.0}};
}

}  // namespace bm::bench
