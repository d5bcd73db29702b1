// Micro-benchmarks of the master's block index (master/block_index.h).
//
// Kept apart from the worker benchmarks: worker/block_status.h and master/block_index.h each
// define a bm::BlockChange, so no translation unit may include both.

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "master/block_index.h"

namespace bm {
namespace {

constexpr uint64_t kPartitions = 1000;

BlockId NthBlock(uint64_t n) { return BlockId::Rdd(n / kPartitions, n % kPartitions); }

// A worker reporting new blocks: Apply of a stored change for a block not yet tracked.
void BM_BlockIndexApplyNew(benchmark::State& state) {
  auto index = std::make_unique<BlockIndex>();
  uint64_t n = 0;
  for (auto _ : state) {
    index->Apply(
        "w1", BlockChange{NthBlock(n++), false, StorageLevel::kMemoryOnly, Tier::kMemory, 1 << 20});
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["blocks"] = static_cast<double>(index->block_count());
}
BENCHMARK(BM_BlockIndexApplyNew);

// A location lookup of a random block among `state.range(0)` tracked ones.
void BM_BlockIndexFind(benchmark::State& state) {
  const uint64_t blocks = static_cast<uint64_t>(state.range(0));
  BlockIndex index;
  for (uint64_t n = 0; n < blocks; ++n) {
    index.Apply("w1",
                BlockChange{NthBlock(n), false, StorageLevel::kMemoryOnly, Tier::kMemory, 1 << 20});
  }
  uint64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(index.Find(NthBlock((n * 7919) % blocks)));
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockIndexFind)->Arg(10000)->Arg(1000000);

// A block moving tier and back on the same worker (eviction spill, then a new memory put).
void BM_BlockIndexMoveTier(benchmark::State& state) {
  BlockIndex index;
  const uint64_t blocks = 100000;
  for (uint64_t n = 0; n < blocks; ++n) {
    index.Apply("w1", BlockChange{NthBlock(n), false, StorageLevel::kMemoryAndDisk, Tier::kMemory,
                                  1 << 20});
  }
  uint64_t n = 0;
  for (auto _ : state) {
    const Tier tier = (n / blocks) % 2 == 0 ? Tier::kDisk : Tier::kMemory;
    index.Apply("w1", BlockChange{NthBlock(n % blocks), false, StorageLevel::kMemoryAndDisk, tier,
                                  1 << 20});
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockIndexMoveTier);

}  // namespace
}  // namespace bm
