// bm-fake-worker: registers with a master as a worker holding N blocks, over the wire protocol
// and without storing anything, for tests of the master at scale (listing a million blocks)
// that would take too long to set up with real puts.
//
//   bm-fake-worker --master ADDR --blocks N [--id fake] [--rdd 1] [--ready-marker FILE]
//
// Registers, reports rdd_<rdd>_0 .. rdd_<rdd>_<N-1> (1 byte each, in memory) in reports of
// 20,000, creates --ready-marker once the master acknowledged them all, then heartbeats every
// 200 ms until killed. Its data port is never listened on: nothing can read the blocks.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <thread>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "common/net/transport.h"

namespace {

constexpr uint64_t kUpdatesPerReport = 20000;

bm::WorkerStats Stats(uint64_t blocks) {
  bm::WorkerStats stats{};
  stats.memory_capacity = uint64_t{1} << 40;
  stats.memory_used = blocks;
  stats.block_count = blocks;
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a worker that only reports blocks"};
  std::string master, id = "fake", ready_marker;
  uint64_t blocks = 0, rdd = 1;
  app.add_option("--master", master)->required();
  app.add_option("--blocks", blocks)->required();
  app.add_option("--id", id);
  app.add_option("--rdd", rdd);
  app.add_option("--ready-marker", ready_marker);
  CLI11_PARSE(app, argc, argv);

  zmq::context_t context;
  bm::RpcChannel channel(context, master, std::chrono::seconds(60));
  {
    capnp::MallocMessageBuilder message;
    bm::proto::RegisterWorker::Builder reg =
        message.initRoot<bm::proto::Request>().initRegisterWorker();
    reg.setWorkerId(id);
    reg.setAddress("tcp://127.0.0.1:1");  // never answers: fine, nothing reads from it
    bm::ToProto(Stats(blocks), reg.initStats());
    bm::Result<bm::IncomingMessage> reply = channel.Call(message);
    if (!reply.ok()) {
      std::cerr << "register: " << reply.status().ToString() << "\n";
      return 1;
    }
  }
  for (uint64_t first = 0; first < blocks; first += kUpdatesPerReport) {
    const uint64_t n = std::min(kUpdatesPerReport, blocks - first);
    capnp::MallocMessageBuilder message;
    bm::proto::ReportBlocks::Builder report =
        message.initRoot<bm::proto::Request>().initReportBlocks();
    report.setWorkerId(id);
    auto updates = report.initUpdates(static_cast<unsigned>(n));
    for (uint64_t i = 0; i < n; ++i) {
      bm::proto::BlockStatus::Builder status = updates[static_cast<unsigned>(i)].initStatus();
      status.setBlockId("rdd_" + std::to_string(rdd) + "_" + std::to_string(first + i));
      status.setTier(bm::proto::Tier::MEMORY);
      status.setSize(1);
      status.setLevel(bm::proto::StorageLevel::MEMORY_ONLY);
      status.setVersion(first + i + 1);
    }
    bm::ToProto(Stats(blocks), report.initStats());
    bm::Result<bm::IncomingMessage> reply = channel.Call(message);
    if (!reply.ok()) {
      std::cerr << "report: " << reply.status().ToString() << "\n";
      return 1;
    }
  }
  if (!ready_marker.empty()) std::ofstream(ready_marker) << getpid() << "\n";
  while (true) {
    capnp::MallocMessageBuilder message;
    bm::proto::Heartbeat::Builder heartbeat =
        message.initRoot<bm::proto::Request>().initHeartbeat();
    heartbeat.setWorkerId(id);
    bm::ToProto(Stats(blocks), heartbeat.initStats());
    bm::Result<bm::IncomingMessage> reply = channel.Call(message);
    if (!reply.ok()) std::cerr << "heartbeat: " << reply.status().ToString() << "\n";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the heartbeat period
  }
}
