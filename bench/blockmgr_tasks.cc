// Client-side measurements of blockmgr through the real client library (blockmgr/client.h).

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "bench/proc_info.h"
#include "bench/tasks.h"
#include "blockmgr/client.h"
#include "common/net/transport.h"

namespace bm::bench {
namespace {

ClientOptions OptionsFor(const Json& task) {
  ClientOptions options;
  options.master_address = task.at("master").get<std::string>();
  options.request_timeout = std::chrono::milliseconds(task.value("timeout_ms", 30000));
  // "location_cache": 0 makes every read ask the master first (the two-round-trip get).
  options.location_cache_entries = task.value("location_cache", options.location_cache_entries);
  // A cluster with keys: the client's secret certificate and the master's public one.
  options.key_file = task.value("key", std::string());
  options.master_key_file = task.value("master_key", std::string());
  // "local_reads": true maps blocks of a worker on this host (docs/storage.md "Same-host reads").
  // Off unless asked: the workloads that compare blockmgr with network peers measure its TCP path,
  // and workload 13 measures both side by side.
  options.local_reads = task.value("local_reads", false);
  // "idle_mapping_bytes": 0 unmaps a mapped block as soon as it is let go, so every get maps it
  // anew (the client otherwise keeps it mapped for the next get of the same version).
  options.idle_mapping_bytes = task.value("idle_mapping_bytes", options.idle_mapping_bytes);
  // "local_arena": false asks the worker for every small block (no small-block arena).
  options.local_arena = task.value("local_arena", options.local_arena);
  return options;
}

// Adds up every 8th byte of `bytes` in 64-bit words (each cache line is read): a reader
// touching the whole block, as a computation would, so a mapping's page faults are paid.
uint64_t TouchEveryLine(std::span<const std::byte> bytes) {
  uint64_t sum = 0;
  for (size_t at = 0; at + sizeof(uint64_t) <= bytes.size(); at += 64) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + at, sizeof word);
    sum += word;
  }
  return sum;
}

Result<StorageLevel> LevelOf(const Json& task) {
  return ParseStorageLevel(task.value("level", std::string("MEMORY_ONLY")));
}

// Block ids of one RDD per task run, so tasks sharing a cluster never touch each other's blocks.
BlockId KeyBlock(const Json& task, int key) {
  return BlockId::Rdd(task.value("rdd", uint64_t{1}), static_cast<uint64_t>(key));
}

// A sink that takes the bytes where the client library received them (as the raw ZeroMQ and
// Redis peers do), checking only that they add up to the expected size.
struct CountingSink {
  uint64_t bytes = 0;
  Status operator()(std::span<const std::byte> range) {
    bytes += range.size();
    return Status::Ok();
  }
};

// The byte at `position` of the big test block: a splitmix64 stream, cheap to make and to check.
uint64_t StreamWord(uint64_t index) {
  uint64_t x = index * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Fills `out` with bytes [position, position + out.size()) of the stream.
void FillStream(uint64_t position, std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    const uint64_t at = position + done;
    const uint64_t word = StreamWord(at / 8);
    const size_t skip = at % 8;
    const size_t n = std::min<size_t>(8 - skip, out.size() - done);
    std::memcpy(out.data() + done, reinterpret_cast<const char*>(&word) + skip, n);
    done += n;
  }
}

uint64_t MaxRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

// `putters` threads at once, each a Client of its own putting `size`-byte blocks over its own
// `ids` keys, puts only: {"put_bytes_per_s" (all of them together), "put_ops"}. What
// concurrent writers get from a master, e.g. how far acknowledgements held for a standby are
// answered together.
Result<Json> ConcurrentPuts(const Json& task, int putters, uint64_t size, int ids,
                            StorageLevel level) {
  const std::vector<std::byte> data = PatternBytes(size);
  const Duration duration = DurationOf(task);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < putters; ++i) clients.push_back(std::make_unique<Client>(OptionsFor(task)));
  std::latch start(putters);
  std::vector<Result<Timed>> timed(putters, InternalError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < putters; ++i) {
    threads.emplace_back([&, i] {
      Client& client = *clients[i];
      int next = 0;
      start.arrive_and_wait();
      timed[i] = RunTimed(duration, [&] {
        return client.Put(KeyBlock(task, i * ids + next++ % ids), data, level).status();
      });
    });
  }
  for (std::thread& thread : threads) thread.join();
  uint64_t ops = 0;
  double seconds = 0;
  for (const Result<Timed>& one : timed) {
    if (!one.ok()) return one.status();
    ops += one->ops;
    seconds = std::max(seconds, one->seconds);
  }
  return Json{{"put_bytes_per_s", seconds > 0 ? static_cast<double>(ops * size) / seconds : 0},
              {"put_ops", ops}};
}

}  // namespace

Result<Json> BlockmgrTransferTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 4);
  BM_ASSIGN_OR_RETURN(StorageLevel level, LevelOf(task));
  if (task.contains("putters")) {
    return ConcurrentPuts(task, task.at("putters").get<int>(), size, ids, level);
  }
  Client client(OptionsFor(task));
  const std::vector<std::byte> data = PatternBytes(size);
  // "put_api": "chunks" sends the bytes from a chunk made once (Client::PutChunks, no copy).
  BlockData chunks;
  chunks.Append(MakeChunk(data));
  const bool use_chunks = task.value("put_api", std::string("span")) == "chunks";
  auto put = [&](int key) {
    return (use_chunks ? client.PutChunks(KeyBlock(task, key), chunks, level)
                       : client.Put(KeyBlock(task, key), data, level))
        .status();
  };
  // "get_api": "whole" receives each block whole with Client::Get (what a caller that keeps
  // the block, like the Python client, pays); by default the bytes are counted in place.
  const std::string get_api = task.value("get_api", std::string("sink"));
  const bool whole = get_api == "whole";
  volatile uint64_t touched = 0;
  auto get = [&](int key) -> Status {
    if (get_api == "chunks") {
      // Client::GetChunks (a same-host read maps the block), every cache line then read.
      BM_ASSIGN_OR_RETURN(BlockData block, client.GetChunks(KeyBlock(task, key)));
      if (block.size != size) return InternalError("get returned a wrong size");
      for (const ChunkPtr& chunk : block.chunks) touched = touched + TouchEveryLine(chunk->bytes());
      return Status::Ok();
    }
    if (whole) {
      BM_ASSIGN_OR_RETURN(std::vector<std::byte> block, client.Get(KeyBlock(task, key)));
      if (block.size() != size) return InternalError("get returned a wrong size");
      return Status::Ok();
    }
    CountingSink counter;
    BM_ASSIGN_OR_RETURN(uint64_t got, client.GetTo(KeyBlock(task, key), std::ref(counter)));
    if (got != size || counter.bytes != size) return InternalError("get returned a wrong size");
    return Status::Ok();
  };
  return MeasureTransfer(DurationOf(task), size, ids, put, get);
}

Result<Json> BlockmgrLookupsTask(const Json& task) {
  const int ids = task.value("ids", 64);
  Client client(OptionsFor(task));
  const std::vector<std::byte> data = PatternBytes(1024);
  for (int key = 0; key < ids; ++key) {
    BM_RETURN_IF_ERROR(client.Put(KeyBlock(task, key), data, StorageLevel::kMemoryOnly).status());
  }
  int next = 0;
  BM_ASSIGN_OR_RETURN(Timed lookups, RunTimed(DurationOf(task), [&]() -> Status {
                        BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> found,
                                            client.Locations({KeyBlock(task, next++ % ids)}));
                        if (found.size() != 1 || found[0].locations.empty()) {
                          return InternalError("a block put was not found");
                        }
                        return Status::Ok();
                      }));
  return Json{{"lookups_per_s", lookups.per_second()}};
}

Result<Json> BlockmgrSmallGetsTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 1000);
  const int threads = task.value("threads", 1);
  const Duration duration = DurationOf(task);
  zmq::context_t context;
  {
    Client loader(OptionsFor(task), context);
    const std::vector<std::byte> data = PatternBytes(size);
    for (int key = 0; key < ids; ++key) {
      BM_RETURN_IF_ERROR(loader.Put(KeyBlock(task, key), data, StorageLevel::kMemoryOnly).status());
    }
  }
  if (task.value("mode", std::string("threads")) == "get_many") {
    // One client, `threads` gets at a time through Client::GetManyChunks (GetMany's bytes as
    // views of the received frames, the fastest way to read small blocks).
    Client client(OptionsFor(task), context);
    std::vector<BlockId> batch;
    int next = 0;
    BM_ASSIGN_OR_RETURN(Timed calls, RunTimed(duration, [&]() -> Status {
                          batch.clear();
                          for (int i = 0; i < threads; ++i)
                            batch.push_back(KeyBlock(task, next++ % ids));
                          for (const auto& got : client.GetManyChunks(batch)) {
                            if (!got.ok()) return got.status();
                            if (got->size != size)
                              return InternalError("get returned a wrong size");
                          }
                          return Status::Ok();
                        }));
    return Json{{"ops_per_s", calls.per_second() * threads}, {"mode", "get_many"}};
  }
  // One Client per thread (a Client is not thread-safe) sharing one ZeroMQ context.
  std::vector<Result<Timed>> results(threads, Result<Timed>(InternalError("not run")));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Client client(OptionsFor(task), context);
      int next = t * 7919;
      results[t] = RunTimed(duration, [&]() -> Status {
        CountingSink counter;
        BM_ASSIGN_OR_RETURN(uint64_t got,
                            client.GetTo(KeyBlock(task, next++ % ids), std::ref(counter)));
        return got == size ? Status::Ok() : InternalError("get returned a wrong size");
      });
    });
  }
  for (std::thread& worker : workers) worker.join();
  double ops_per_s = 0;
  for (const Result<Timed>& result : results) {
    if (!result.ok()) return result.status();
    ops_per_s += result->per_second();
  }
  return Json{{"ops_per_s", ops_per_s}, {"mode", "threads"}};
}

// Workload 7, the shuffle fetch: `ids` blocks of `size` bytes stored, then fetched all at once
// by a reducer that has never seen them, through one Client::GetManyChunks of every id (location
// lookups, then as many getBlocks requests in flight as it sends). Each timed fetch uses a
// fresh Client, so its location cache starts empty as a reducer's would; the bytes are checked
// by size. Returns the seconds of one whole fetch.
Result<Json> BlockmgrShuffleFetchTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 10000);
  zmq::context_t context;
  std::vector<BlockId> all;
  {
    Client loader(OptionsFor(task), context);
    const std::vector<std::byte> data = PatternBytes(size);
    for (int key = 0; key < ids; ++key) {
      all.push_back(KeyBlock(task, key));
      BM_RETURN_IF_ERROR(loader.Put(all.back(), data, StorageLevel::kMemoryOnly).status());
    }
  }
  // CPU seconds per operation of this process and of the servers named in the task
  // ("worker_pid", "master_pid"): on a shared machine a steadier view than the wall clock.
  std::vector<std::pair<std::string, pid_t>> processes = {{"client", getpid()}};
  for (const char* server : {"worker", "master"}) {
    const std::string key = std::string(server) + "_pid";
    if (task.contains(key)) processes.emplace_back(server, task.at(key).get<pid_t>());
  }
  auto cpu_now = [&] {
    std::vector<double> seconds;
    for (const auto& [name, pid] : processes) seconds.push_back(ProcessCpuSeconds(pid));
    return seconds;
  };
  Json out{{"ok", true}};
  auto measure = [&](const std::string& name, const std::function<Status()>& op) -> Status {
    const std::vector<double> before = cpu_now();
    BM_ASSIGN_OR_RETURN(Timed timed, RunTimed(DurationOf(task), op));
    const std::vector<double> after = cpu_now();
    const double ops = static_cast<double>(timed.ops);
    out[name + "_seconds"] = timed.seconds / ops;
    for (size_t i = 0; i < processes.size(); ++i) {
      out[name + "_cpu_ms_" + processes[i].first] = (after[i] - before[i]) * 1e3 / ops;
    }
    return Status::Ok();
  };
  BM_RETURN_IF_ERROR(measure("fetch", [&]() -> Status {
    Client reducer(OptionsFor(task), context);
    for (const auto& got : reducer.GetManyChunks(all)) {
      if (!got.ok()) return got.status();
      if (got->size != size) return InternalError("get returned a wrong size");
    }
    return Status::Ok();
  }));
  // Where a fetch's time goes (diagnostic): the location lookup of every id alone, and a
  // second GetMany of the same client, whose locations are then cached (the reads alone).
  BM_RETURN_IF_ERROR(measure("lookup", [&]() -> Status {
    Client reducer(OptionsFor(task), context);
    return reducer.Locations(all).status();
  }));
  Client warm(OptionsFor(task), context);
  BM_RETURN_IF_ERROR(warm.Locations(all).status());
  BM_RETURN_IF_ERROR(measure("cached_fetch", [&]() -> Status {
    for (const auto& got : warm.GetManyChunks(all)) BM_RETURN_IF_ERROR(got.status());
    return Status::Ok();
  }));
  return out;
}

Result<Json> BlockmgrBigBlockTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  Client client(OptionsFor(task));
  BM_RETURN_IF_ERROR(client.PingMaster());
  const uint64_t idle_rss = ProcStatusBytes(getpid(), "VmRSS").value_or(0);
  const BlockId id = KeyBlock(task, 0);
  using Clock = std::chrono::steady_clock;

  uint64_t produced = 0;
  ByteSource source = [&](std::span<std::byte> out) -> Result<size_t> {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(out.size(), size - produced));
    FillStream(produced, out.first(n));
    produced += n;
    return n;
  };
  const Clock::time_point put_start = Clock::now();
  BM_ASSIGN_OR_RETURN(PutResult put, client.PutStream(id, source, size, StorageLevel::kDiskOnly));
  const double put_seconds = std::chrono::duration<double>(Clock::now() - put_start).count();

  uint64_t checked = 0;
  bool exact = true;
  std::vector<std::byte> expected;
  ByteSink sink = [&](std::span<const std::byte> bytes) {
    expected.resize(bytes.size());
    FillStream(checked, expected);
    if (std::memcmp(expected.data(), bytes.data(), bytes.size()) != 0) exact = false;
    checked += bytes.size();
    return Status::Ok();
  };
  const Clock::time_point get_start = Clock::now();
  BM_ASSIGN_OR_RETURN(uint64_t got, client.GetTo(id, sink));
  const double get_seconds = std::chrono::duration<double>(Clock::now() - get_start).count();
  BM_RETURN_IF_ERROR(client.Remove({id}).status());
  return Json{{"put_bytes_per_s", static_cast<double>(size) / put_seconds},
              {"get_bytes_per_s", static_cast<double>(size) / get_seconds},
              {"tier", put.tier == Tier::kDisk ? "disk" : "memory"},
              {"byte_exact", exact && got == size && checked == size},
              {"client_idle_rss", idle_rss},
              {"client_peak_rss", MaxRssBytes()}};
}

}  // namespace bm::bench

namespace bm::bench {

// Diagnostic: getBlock requests straight to a worker ("worker" address), no master lookup, one
// at a time; splits a client get's latency into its lookup and its read.
Result<Json> WorkerGetsTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 1000);
  zmq::context_t context;
  RpcChannel channel(context, task.at("worker").get<std::string>(), std::chrono::seconds(10));
  int next = 0;
  BM_ASSIGN_OR_RETURN(
      Timed gets, RunTimed(DurationOf(task), [&]() -> Status {
        capnp::MallocMessageBuilder message;
        proto::GetBlock::Builder get = message.initRoot<proto::Request>().initGetBlock();
        get.setBlockId(KeyBlock(task, next++ % ids).ToString());
        get.setOffset(0);
        get.setMaxLength(size);
        BM_ASSIGN_OR_RETURN(IncomingMessage reply, channel.Call(message));
        return reply.payload_bytes() == size ? Status::Ok() : InternalError("wrong size");
      }));
  return Json{{"ops_per_s", gets.per_second()}};
}

// blockmgr ("master", "size", "count", "rdd", "level", "done_file"): puts `count` blocks of
// `size`, each in an RDD of its own (rdd, rdd + 1, ...) so that a put may evict the ones before
// it, then creates `done_file`.
Result<Json> BlockmgrPutManyTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int count = task.at("count").get<int>();
  const uint64_t rdd = task.value("rdd", uint64_t{1});
  BM_ASSIGN_OR_RETURN(StorageLevel level, LevelOf(task));
  Client client(OptionsFor(task));
  const std::vector<std::byte> data = PatternBytes(size);
  const auto start = std::chrono::steady_clock::now();
  Status failed = Status::Ok();
  for (int i = 0; i < count && failed.ok(); ++i) {
    failed = client.Put(BlockId::Rdd(rdd + static_cast<uint64_t>(i), 0), data, level).status();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (task.contains("done_file")) {
    std::ofstream(task.at("done_file").get<std::string>()) << "done\n";
  }
  BM_RETURN_IF_ERROR(failed);
  return Json{{"put_bytes_per_s", static_cast<double>(size) * count / seconds}};
}

// blockmgr ("master", "size", "ids", "rdd", "max_seconds", "stop_file"): puts `ids` MEMORY_ONLY
// blocks of `size`, then gets them one at a time until `stop_file` exists (or max_seconds
// pass), timing each get. Returns the latency percentiles in microseconds.
Result<Json> BlockmgrGetLatencyTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  const int ids = task.value("ids", 64);
  const std::string stop_file = task.value("stop_file", std::string());
  const auto max_time = std::chrono::duration<double>(task.value("max_seconds", 60.0));
  Client client(OptionsFor(task));
  const std::vector<std::byte> data = PatternBytes(size);
  for (int key = 0; key < ids; ++key) {
    BM_RETURN_IF_ERROR(client.Put(KeyBlock(task, key), data, StorageLevel::kMemoryOnly).status());
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> micros;
  uint64_t errors = 0;
  const auto start = Clock::now();
  for (int next = 0;; ++next) {
    if (next % 64 == 0) {
      if (Clock::now() - start > max_time) break;
      if (!stop_file.empty() && std::filesystem::exists(stop_file)) break;
    }
    CountingSink counter;
    const auto before = Clock::now();
    Result<uint64_t> got = client.GetTo(KeyBlock(task, next % ids), std::ref(counter));
    micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - before).count());
    if (!got.ok() || *got != size) ++errors;
  }
  if (micros.empty()) return InternalError("no get ran");
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<size_t>(q * (micros.size() - 1))]; };
  return Json{{"p50_us", at(0.5)},
              {"p99_us", at(0.99)},
              {"max_us", micros.back()},
              {"gets", micros.size()},
              {"errors", errors}};
}

}  // namespace bm::bench
