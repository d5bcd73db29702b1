// bm-map-probe: maps one block through a same-host read from its own process, for the
// integration tests of pins (a reader killed with its mapping held) and of who may read
// (another uid).
//
//   bm-map-probe --master ADDR --block rdd_1_0 [--uid UID] [--mapped-marker FILE]
//
// With --uid it drops to that uid first (it must start as root). It reads the block with
// Client::GetMapped: when a mapping came back it creates --mapped-marker (if given), prints
// "mapped N" and holds the mapping until killed; otherwise it prints "not mapped" and exits 3
// (and 1 when even a read over TCP fails).

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <optional>

#include "blockmgr/client.h"

int main(int argc, char** argv) {
  CLI::App app{"one same-host read, held"};
  std::string master, block_text, mapped_marker;
  std::optional<uid_t> uid;
  app.add_option("--master", master)->required();
  app.add_option("--block", block_text)->required();
  app.add_option("--uid", uid);
  app.add_option("--mapped-marker", mapped_marker);
  CLI11_PARSE(app, argc, argv);

  if (uid.has_value() && (setgid(*uid) != 0 || setuid(*uid) != 0)) {
    std::cerr << "cannot become uid " << *uid << "\n";
    return 2;
  }
  bm::Result<bm::BlockId> block = bm::BlockId::Parse(block_text);
  if (!block.ok()) {
    std::cerr << block.status().ToString() << "\n";
    return 2;
  }
  bm::Client client(bm::ClientOptions{master});
  std::optional<bm::BlockData> mapped = client.GetMapped(*block);
  if (!mapped.has_value()) {
    bm::Result<std::vector<std::byte>> over_tcp = client.Get(*block);
    std::cout << "not mapped" << (over_tcp.ok() ? "" : ": " + over_tcp.status().ToString())
              << std::endl;
    return over_tcp.ok() ? 3 : 1;
  }
  std::cout << "mapped " << mapped->size << std::endl;
  if (!mapped_marker.empty()) std::ofstream(mapped_marker) << "mapped\n";
  while (true) pause();
}
