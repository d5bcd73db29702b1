// bm-put-probe: one streamed put from its own process, for the integration tests of what a
// worker does when a client stops mid-upload (killed, or stalled).
//
//   bm-put-probe --master ADDR --block rdd_9_0 --size BYTES [--stall-after BYTES]
//                [--worker ID] [--stalled-marker FILE]
//
// Streams RandomBytes(size, seed = 7) as the block (MEMORY_ONLY). With --stall-after the
// source stops after that many bytes: it creates --stalled-marker (if given) and never
// returns, so the put hangs mid-upload until the test kills the process. Exits 0 when the put
// succeeded, 1 when it failed.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>

#include "blockmgr/client.h"
#include "tests/support/files.h"

int main(int argc, char** argv) {
  CLI::App app{"one streamed put"};
  std::string master, block_text, worker, stalled_marker;
  uint64_t size = 0;
  std::optional<uint64_t> stall_after;
  app.add_option("--master", master)->required();
  app.add_option("--block", block_text)->required();
  app.add_option("--size", size)->required();
  app.add_option("--stall-after", stall_after);
  app.add_option("--worker", worker);
  app.add_option("--stalled-marker", stalled_marker);
  CLI11_PARSE(app, argc, argv);

  bm::Result<bm::BlockId> block = bm::BlockId::Parse(block_text);
  if (!block.ok()) {
    std::cerr << block.status().ToString() << "\n";
    return 2;
  }
  const std::vector<std::byte> bytes = bm::testing::RandomByteVector(size, 7);
  uint64_t sent = 0;
  bm::ByteSource source = [&](std::span<std::byte> out) -> bm::Result<size_t> {
    if (stall_after && sent >= *stall_after) {
      if (!stalled_marker.empty()) std::ofstream(stalled_marker) << getpid() << "\n";
      while (true) pause();
    }
    uint64_t n = std::min<uint64_t>(out.size(), size - sent);
    if (stall_after) n = std::min(n, *stall_after - sent);
    std::memcpy(out.data(), bytes.data() + sent, n);
    sent += n;
    return static_cast<size_t>(n);
  };
  bm::Client client(bm::ClientOptions{.master_address = master});
  bm::PutOptions options;
  if (!worker.empty()) options.worker_id = worker;
  bm::Result<bm::PutResult> put =
      client.PutStream(*block, source, size, bm::StorageLevel::kMemoryOnly, options);
  if (!put.ok()) {
    std::cerr << put.status().ToString() << "\n";
    return 1;
  }
  return 0;
}
