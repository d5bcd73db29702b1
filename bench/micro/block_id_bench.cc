// Micro-benchmarks of block id parsing and printing (blockmgr/block_id.h).

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"

namespace bm {
namespace {

void BM_BlockIdParse(benchmark::State& state, std::string text) {
  for (auto _ : state) benchmark::DoNotOptimize(BlockId::Parse(text));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_BlockIdParse, rdd, std::string("rdd_1234_567"));
BENCHMARK_CAPTURE(BM_BlockIdParse, shuffle, std::string("shuffle_12_3456_789"));
BENCHMARK_CAPTURE(BM_BlockIdParse, invalid, std::string("rdd_12_x"));

void BM_BlockIdToString(benchmark::State& state) {
  const BlockId id = BlockId::Rdd(1234, 567);
  for (auto _ : state) benchmark::DoNotOptimize(id.ToString());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockIdToString);

}  // namespace
}  // namespace bm
