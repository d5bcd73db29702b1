// Micro-benchmarks of the worker's memory store (worker/memory_store.h).

#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "blockmgr/chunk.h"
#include "worker/memory_store.h"

namespace bm {
namespace {

constexpr uint64_t kPartitions = 1000;

BlockId NthBlock(uint64_t n) { return BlockId::Rdd(n / kPartitions, n % kPartitions); }

// One shared chunk stands in for a block's bytes: the store keeps pointers, not copies.
MemoryBlock MakeBlock(uint64_t n, const ChunkPtr& chunk) {
  MemoryBlock block{NthBlock(n), StorageLevel::kMemoryOnly, {}, n + 1};
  block.data.Append(chunk);
  return block;
}

ChunkPtr SmallChunk() { return MakeChunk(std::vector<std::byte>(1 << 10)); }

// A store with no practical budget holding blocks 0 .. blocks-1, each `chunk`.
std::unique_ptr<MemoryStore> FilledStore(uint64_t blocks, const ChunkPtr& chunk) {
  auto store = std::make_unique<MemoryStore>(UINT64_MAX / 2);
  for (uint64_t n = 0; n < blocks; ++n) {
    (void)store->Reserve(NthBlock(n), chunk->size());
    store->Insert(MakeBlock(n, chunk));
  }
  return store;
}

// Reserve + Insert of a new block and the Remove of an old one: a put's work in the store,
// with the store holding `state.range(0)` blocks.
void BM_MemoryStorePut(benchmark::State& state) {
  const uint64_t blocks = static_cast<uint64_t>(state.range(0));
  const ChunkPtr chunk = SmallChunk();
  std::unique_ptr<MemoryStore> filled = FilledStore(blocks, chunk);
  MemoryStore& store = *filled;
  uint64_t next = blocks;
  for (auto _ : state) {
    Result<std::vector<MemoryBlock>> evicted = store.Reserve(NthBlock(next), chunk->size());
    benchmark::DoNotOptimize(evicted);
    store.Insert(MakeBlock(next, chunk));
    benchmark::DoNotOptimize(store.Remove(NthBlock(next - blocks)));
    ++next;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemoryStorePut)->Arg(1000)->Arg(100000);

// Get (which also moves the block to the LRU's recent end) of random stored blocks.
void BM_MemoryStoreGet(benchmark::State& state) {
  const uint64_t blocks = static_cast<uint64_t>(state.range(0));
  const ChunkPtr chunk = SmallChunk();
  std::unique_ptr<MemoryStore> filled = FilledStore(blocks, chunk);
  MemoryStore& store = *filled;
  uint64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.Get(NthBlock((n * 7919) % blocks)));
    ++n;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemoryStoreGet)->Arg(1000)->Arg(100000);

}  // namespace
}  // namespace bm
