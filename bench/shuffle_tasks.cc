// Workload 15's client side: one whole shuffle (every piece written by mapper processes, then
// every partition read by reducer processes) through blockmgr's partition streams or as
// separate blocks. The Redis side is in peer_tasks.cc.

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "bench/tasks.h"
#include "blockmgr/block_id.h"
#include "blockmgr/client.h"

namespace bm::bench {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ClientOptions OptionsOf(const Json& task) {
  ClientOptions options{task.at("master").get<std::string>(), std::chrono::milliseconds(30000)};
  options.local_reads = task.value("local_reads", true);
  return options;
}

// The pieces of map `map` for each partition: `size` bytes whose first bytes name the map and
// partition (so a reader can tell them apart), the rest a pattern.
std::vector<std::byte> PieceOf(const std::vector<std::byte>& pattern, uint32_t map,
                               uint32_t partition) {
  std::vector<std::byte> piece = pattern;
  const uint64_t tag = (uint64_t{map} << 32) | partition;
  std::memcpy(piece.data(), &tag, std::min(piece.size(), sizeof(tag)));
  return piece;
}

Status MapWithWriters(const Json& task, int process, int processes) {
  const uint64_t id = task.at("shuffle_id").get<uint64_t>();
  const uint32_t maps = task.at("maps").get<uint32_t>();
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const std::vector<std::byte> pattern = PatternBytes(task.at("size").get<uint64_t>());
  Client client(OptionsOf(task));
  for (uint32_t map = process; map < maps; map += processes) {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleWriter> writer,
                        client.OpenShuffleWriter(id, map, 0));
    for (uint32_t partition = 0; partition < partitions; ++partition) {
      BM_RETURN_IF_ERROR(writer->Write(partition, PieceOf(pattern, map, partition)));
    }
    BM_RETURN_IF_ERROR(writer->Commit());
  }
  return Status::Ok();
}

Status ReduceWithReaders(const Json& task, int process, int processes) {
  const uint64_t id = task.at("shuffle_id").get<uint64_t>();
  const uint32_t maps = task.at("maps").get<uint32_t>();
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const uint64_t size = task.at("size").get<uint64_t>();
  Client client(OptionsOf(task));
  for (uint32_t partition = process; partition < partitions; partition += processes) {
    BM_ASSIGN_OR_RETURN(std::unique_ptr<ShuffleReader> reader,
                        client.OpenShuffleReader(id, partition));
    uint64_t bytes = 0;
    BM_RETURN_IF_ERROR(reader->ForEach([&](uint32_t, std::span<const std::byte> piece) {
      bytes += piece.size();
      return Status::Ok();
    }));
    if (bytes != uint64_t{maps} * size) {
      return InternalError("partition " + std::to_string(partition) + " read " +
                           std::to_string(bytes) + " bytes");
    }
  }
  return Status::Ok();
}

Status MapWithBlocks(const Json& task, int process, int processes) {
  const uint64_t id = task.at("shuffle_id").get<uint64_t>();
  const uint32_t maps = task.at("maps").get<uint32_t>();
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const std::vector<std::byte> pattern = PatternBytes(task.at("size").get<uint64_t>());
  Client client(OptionsOf(task));
  for (uint32_t map = process; map < maps; map += processes) {
    for (uint32_t partition = 0; partition < partitions; ++partition) {
      BM_RETURN_IF_ERROR(client
                             .Put(BlockId::Shuffle(id, map, partition),
                                  PieceOf(pattern, map, partition), StorageLevel::kMemoryOnly)
                             .status());
    }
  }
  return Status::Ok();
}

Status ReduceWithBlocks(const Json& task, int process, int processes) {
  const uint64_t id = task.at("shuffle_id").get<uint64_t>();
  const uint32_t maps = task.at("maps").get<uint32_t>();
  const uint32_t partitions = task.at("partitions").get<uint32_t>();
  const uint64_t size = task.at("size").get<uint64_t>();
  Client client(OptionsOf(task));
  for (uint32_t partition = process; partition < partitions; partition += processes) {
    std::vector<BlockId> ids;
    for (uint32_t map = 0; map < maps; ++map) ids.push_back(BlockId::Shuffle(id, map, partition));
    for (const Result<BlockData>& block : client.GetManyChunks(ids)) {
      BM_RETURN_IF_ERROR(block.status());
      if (block->size != size) return InternalError("a block of the wrong size");
    }
  }
  return Status::Ok();
}

}  // namespace

Status RunInProcesses(int processes, const std::function<Status(int process)>& run) {
  std::cout.flush();
  std::cerr.flush();
  std::vector<pid_t> children;
  for (int process = 0; process < processes; ++process) {
    const pid_t pid = ::fork();
    if (pid < 0) return InternalError("fork failed");
    if (pid == 0) {
      // A child runs its share and leaves without the parent's exit handlers.
      const Status done = run(process);
      if (!done.ok()) std::cerr << "bm-bench child " << process << ": " << done.ToString() << "\n";
      std::cerr.flush();
      ::_exit(done.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed > 0) {
    return InternalError(std::to_string(failed) + " of " + std::to_string(processes) +
                         " processes failed (see the clients' log)");
  }
  return Status::Ok();
}

Result<Json> BlockmgrShuffleTask(const Json& task) {
  const uint64_t id = task.at("shuffle_id").get<uint64_t>();
  const int processes = task.value("processes", 4);
  const bool blocks = task.value("mode", std::string("push")) == "blocks";
  if (!blocks) {
    // Registered before the mappers fork, by a client gone by then (no ZeroMQ context may
    // cross a fork).
    Client client(OptionsOf(task));
    Result<StorageLevel> level = ParseStorageLevel(task.value("level", std::string("MEMORY_ONLY")));
    BM_RETURN_IF_ERROR(level.status());
    BM_RETURN_IF_ERROR(client
                           .RegisterShuffle({.id = id,
                                             .maps = task.at("maps").get<uint32_t>(),
                                             .partitions = task.at("partitions").get<uint32_t>(),
                                             .level = *level})
                           .status());
  }
  const auto start = std::chrono::steady_clock::now();
  BM_RETURN_IF_ERROR(RunInProcesses(processes, [&](int process) {
    return blocks ? MapWithBlocks(task, process, processes)
                  : MapWithWriters(task, process, processes);
  }));
  const double write_seconds = Since(start);
  const auto read_start = std::chrono::steady_clock::now();
  BM_RETURN_IF_ERROR(RunInProcesses(processes, [&](int process) {
    return blocks ? ReduceWithBlocks(task, process, processes)
                  : ReduceWithReaders(task, process, processes);
  }));
  const double read_seconds = Since(read_start);
  const double end_to_end = Since(start);
  // The same partitions read again over TCP, as by reducers on other hosts (the workers here
  // are all on the reducers' host, so the reads above went through their local sockets).
  std::optional<double> tcp_read_seconds;
  if (!blocks && task.value("compare_tcp", false)) {
    Json over_tcp = task;
    over_tcp["local_reads"] = false;
    const auto tcp_start = std::chrono::steady_clock::now();
    BM_RETURN_IF_ERROR(RunInProcesses(
        processes, [&](int process) { return ReduceWithReaders(over_tcp, process, processes); }));
    tcp_read_seconds = Since(tcp_start);
  }
  {
    Client client(OptionsOf(task));
    if (blocks) {
      std::vector<BlockId> ids;
      for (uint32_t map = 0; map < task.at("maps").get<uint32_t>(); ++map) {
        for (uint32_t p = 0; p < task.at("partitions").get<uint32_t>(); ++p) {
          ids.push_back(BlockId::Shuffle(id, map, p));
        }
      }
      BM_RETURN_IF_ERROR(client.Remove(ids).status());
    } else {
      BM_RETURN_IF_ERROR(client.UnregisterShuffle(id));
    }
  }
  Json result{{"end_to_end_seconds", end_to_end},
              {"write_seconds", write_seconds},
              {"read_seconds", read_seconds}};
  if (tcp_read_seconds) result["tcp_read_seconds"] = *tcp_read_seconds;
  return result;
}

}  // namespace bm::bench
