// Micro-benchmarks of the status queries the master's loop answers for --http
// (master/cluster_snapshot.h): how long the loop is busy with each, by index size.

#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "common/core/clock.h"
#include "master/block_index.h"
#include "master/cluster_snapshot.h"
#include "master/worker_registry.h"

namespace bm {
namespace {

constexpr uint64_t kPartitions = 1000;

// `blocks` blocks as rdd_<n/1000>_<n%1000> on two workers, every RDD registered.
struct Cluster {
  explicit Cluster(uint64_t blocks) : registry(clock) {
    registry.Register("w1", "tcp://127.0.0.1:1", WorkerStats{});
    registry.Register("w2", "tcp://127.0.0.1:2", WorkerStats{});
    for (uint64_t n = 0; n < blocks; ++n) {
      index.Apply(n % 2 ? "w1" : "w2",
                  BlockChange{BlockId::Rdd(n / kPartitions, n % kPartitions), false,
                              StorageLevel::kMemoryOnly, Tier::kMemory, 1 << 20});
    }
    for (uint64_t rdd = 0; rdd * kPartitions < blocks; ++rdd) {
      rdds[rdd] = RddDescription{"rdd", StorageLevel::kMemoryOnly, kPartitions};
    }
  }
  MasterView View() const {
    return MasterView{index, registry, rdds, counters, 0, 0, 0, false, clock.Now()};
  }

  FakeClock clock;
  WorkerRegistry registry;
  BlockIndex index;
  std::map<uint64_t, RddDescription> rdds;
  MasterCounters counters;
};

// A snapshot for the pages and /metrics: one scan of every RDD block.
void BM_BuildClusterSnapshot(benchmark::State& state) {
  Cluster cluster(static_cast<uint64_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(BuildClusterSnapshot(cluster.View()));
}
BENCHMARK(BM_BuildClusterSnapshot)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);

// A page of 100 blocks from the middle of the listing of all blocks.
void BM_QueryBlockPage(benchmark::State& state) {
  Cluster cluster(static_cast<uint64_t>(state.range(0)));
  const BlockId cursor = BlockId::Rdd(state.range(0) / kPartitions / 2, 500);
  for (auto _ : state) {
    benchmark::DoNotOptimize(QueryBlockPage(cluster.View(), std::nullopt, cursor, 100));
  }
}
BENCHMARK(BM_QueryBlockPage)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bm
