// Caches one partition of a computation in a blockmgr cluster: the first GetOrCompute runs the
// computation and stores its result, the second finds it cached. Built against the installed
// library only (<blockmgr/...>, blockmgr::client).
//
//   blockmgr-consumer tcp://MASTER:7077 [RDD_ID]

#include <blockmgr/client.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// The partition: the squares of 0..999, as little-endian 64-bit numbers.
std::vector<std::byte> ComputeSquares() {
  std::vector<std::byte> bytes;
  for (uint64_t i = 0; i < 1000; ++i) {
    const uint64_t square = i * i;
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<std::byte>(square >> (8 * b)));
  }
  return bytes;
}

int Fail(const std::string& what, const bm::Status& status) {
  std::fprintf(stderr, "blockmgr-consumer: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: blockmgr-consumer tcp://MASTER:PORT [RDD_ID]\n");
    return 2;
  }
  const uint64_t rdd_id = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  bm::Client client(bm::ClientOptions{.master_address = argv[1]});
  const bm::BlockId block = bm::BlockId::Rdd(rdd_id, 0);
  int computed = 0;
  auto compute = [&]() -> bm::Result<std::vector<std::byte>> {
    ++computed;
    return ComputeSquares();
  };

  for (int round = 0; round < 2; ++round) {
    bm::Result<std::vector<std::byte>> partition =
        client.GetOrCompute(block, bm::StorageLevel::kMemoryAndDisk, compute);
    if (!partition.ok()) return Fail("GetOrCompute " + block.ToString(), partition.status());
    if (partition.value() != ComputeSquares()) {
      std::fprintf(stderr, "blockmgr-consumer: %s came back different\n", block.ToString().c_str());
      return 1;
    }
  }
  const bm::CacheCounters& counters = client.counters();
  std::printf("block %s: computed %d time(s), %llu hit(s), %llu miss(es)\n",
              block.ToString().c_str(), computed, static_cast<unsigned long long>(counters.hits()),
              static_cast<unsigned long long>(counters.misses));
  return computed == 1 && counters.hits() == 1 ? 0 : 1;
}
