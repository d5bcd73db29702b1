// bm-goc-probe: one get-or-compute call from its own process, for the integration tests of
// exactly-once computing across processes (and of a computing client that dies).
//
//   bm-goc-probe --master ADDR --block rdd_9_0 --size 1000 [--lease-ms 1000]
//                [--compute-log FILE] [--hang-marker FILE] [--stall-marker FILE] [--salt N]
//
// The computed bytes are RandomBytes(size, seed = partition number), so any process computes
// the same block (with --salt N, seed = partition + N: a compute whose bytes can be told apart).
// Each compute appends "<pid>\n" to --compute-log. With --hang-marker the
// compute creates that file and then never returns (the test kills the process). With
// --stall-marker the compute creates that file and stops its own process (SIGSTOP) until the test
// continues it, then returns. Prints the client's counters as one JSON object and exits 0 on
// success, 1 on failure.

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "blockmgr/client.h"
#include "tests/support/files.h"

int main(int argc, char** argv) {
  CLI::App app{"one get-or-compute call"};
  std::string master, block_text, compute_log, hang_marker, stall_marker;
  uint64_t salt = 0;
  size_t size = 1000;
  int lease_ms = 1000;
  app.add_option("--master", master)->required();
  app.add_option("--block", block_text)->required();
  app.add_option("--size", size);
  app.add_option("--lease-ms", lease_ms);
  app.add_option("--compute-log", compute_log);
  app.add_option("--hang-marker", hang_marker);
  app.add_option("--stall-marker", stall_marker);
  app.add_option("--salt", salt);
  CLI11_PARSE(app, argc, argv);

  bm::Result<bm::BlockId> block = bm::BlockId::Parse(block_text);
  if (!block.ok()) {
    std::cerr << block.status().ToString() << "\n";
    return 2;
  }
  bm::ClientOptions options{.master_address = master};
  options.compute_lease = std::chrono::milliseconds(lease_ms);
  options.compute_wait = std::chrono::milliseconds(500);
  bm::Client client(options);
  const uint64_t seed = (block->is_rdd() ? block->partition() : 0) + salt;
  bm::Result<std::vector<std::byte>> data = client.GetOrCompute(
      *block, bm::StorageLevel::kMemoryOnly, [&]() -> bm::Result<std::vector<std::byte>> {
        if (!compute_log.empty()) std::ofstream(compute_log, std::ios::app) << getpid() << "\n";
        if (!hang_marker.empty()) {
          std::ofstream(hang_marker) << getpid() << "\n";
          while (true) pause();
        }
        if (!stall_marker.empty()) {
          std::ofstream(stall_marker) << getpid() << "\n";
          raise(SIGSTOP);
        }
        return bm::testing::RandomByteVector(size, seed);
      });
  if (!data.ok()) {
    std::cerr << data.status().ToString() << "\n";
    return 1;
  }
  if (*data != bm::testing::RandomByteVector(size, seed)) {
    std::cerr << "wrong bytes\n";
    return 1;
  }
  const bm::CacheCounters& c = client.counters();
  std::cout << nlohmann::json{{"hits", c.hits()},
                              {"misses", c.misses},
                              {"computes", c.computes},
                              {"waits", c.waits},
                              {"store_failures", c.store_failures}}
                   .dump()
            << "\n";
  return 0;
}
