#pragma once

// Client-side measurements. bm-bench runs each one in a child process of its own
// (`bm-bench --client '<task json>'`), so the client never shares an address space, allocator
// or CPU accounting with the servers it measures. A task reads its parameters from a JSON
// object and returns its figures as one.
//
// Parameters every task takes: "seconds" and "min_ops" (see Duration).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "bench/timing.h"
#include "blockmgr/status.h"

namespace bm::bench {

using Json = nlohmann::json;

// Runs the task named by task["task"]. kInvalidArgument for an unknown task.
Result<Json> RunClientTask(const Json& task);

// For one of several client processes started together: sleeps until the wall-clock time
// `start_at_ms` (milliseconds since the epoch), so that their measurements overlap. Returns how
// many milliseconds late this process reached it (0 when on time).
int64_t WaitForCommonStart(int64_t start_at_ms);

// ---- the tasks (one per peer and shape of traffic) ----

// blockmgr ("master", "size", "level", "ids"): puts then gets blocks of `size`. With
// "putters": puts only, from that many clients at once (threads; 1 for one), `ids` keys each.
Result<Json> BlockmgrTransferTask(const Json& task);
// blockmgr ("master", "size", "ids", "threads"): gets of small blocks, `threads` clients at once.
Result<Json> BlockmgrSmallGetsTask(const Json& task);
// blockmgr ("master", "size", "count", "rdd", "level", "done_file"): puts `count` blocks, one
// RDD each, then creates done_file.
Result<Json> BlockmgrPutManyTask(const Json& task);
// blockmgr ("master", "size", "ids", "rdd", "max_seconds", "stop_file"): one get at a time
// until stop_file exists; latency percentiles.
Result<Json> BlockmgrGetLatencyTask(const Json& task);
// A worker alone ("worker", "size", "ids"): getBlock round trips with no master lookup.
Result<Json> WorkerGetsTask(const Json& task);
// blockmgr ("master", "size", "ids"): workload 7, every block fetched by one GetMany.
Result<Json> BlockmgrShuffleFetchTask(const Json& task);
// Looks up one of `ids` blocks it put (1 KiB each) per getLocations, one request at a time:
// the master's round trip as one client sees it. {"lookups_per_s"}.
Result<Json> BlockmgrLookupsTask(const Json& task);
// blockmgr ("master", "size", "partitions", "rdd", "cheap_seconds", "accesses", "warmup", ...):
// workload 14, get-or-compute of partitions with skewed compute costs in a Zipf-like order.
// {"recompute_seconds", "hit_ratio", "computes", "expensive_computes", "wall_seconds", ...}.
Result<Json> BlockmgrRecomputeTask(const Json& task);
// blockmgr ("master", "size"): one huge DISK_ONLY block streamed in and out, checked byte for byte.
Result<Json> BlockmgrBigBlockTask(const Json& task);
// The worker's disk store in this process ("dir", "size"): plain values against blob files.
Result<Json> DiskStoreFormatsTask(const Json& task);
// Plain files ("dir", "size", "sync", "new_files"): write(2) of a block's bytes to a file,
// fdatasync(2) when "sync", each to a file of its own when "new_files" (else 4 names reused).
Result<Json> FileWriteSyncTask(const Json& task);
// bm-master ("master", "master_pid", "counts", "batch"): a fake worker reports blocks.
Result<Json> MasterLoadTask(const Json& task);
// Redis ("port", "size", "ids"): SET then GET.
Result<Json> RedisTransferTask(const Json& task);
// Redis ("port", "size", "ids", "pipeline"): GETs, `pipeline` in flight.
Result<Json> RedisSmallGetsTask(const Json& task);
// Redis ("port", "size", "ids", "depths"): workload 7, every value fetched by pipelined GETs
// and by MGETs at each depth; the best.
Result<Json> RedisShuffleFetchTask(const Json& task);
// memcached ("port", "size", "ids"): set then get.
Result<Json> MemcachedTransferTask(const Json& task);
// Raw ZeroMQ ("endpoint", "size"): the bytes in 1 MiB zero-copy frames, each way.
Result<Json> ZmqTransferTask(const Json& task);
// Raw ZeroMQ ("endpoint", "size"): request/reply round trips carrying `size` bytes back.
// {"ops_per_s", "cpu_us_per_op"}; with "start_at_ms", one round trip first, then the
// measurement from that common start ({"late_ms"}).
Result<Json> ZmqRoundTripsTask(const Json& task);
// memcpy ("size") between two buffers already touched: the machine's copy bandwidth.
Result<Json> MemcpyTask(const Json& task);
// libsodium ("size"): sealing and opening `size`-byte frames with crypto_box_afternm
// (XSalsa20-Poly1305), as libzmq's CURVE does to every frame, on one core:
// {"seal_bytes_per_s", "open_bytes_per_s"}.
Result<Json> CurveCryptoTask(const Json& task);

// blockmgr ("master", "shuffle_id", "maps", "partitions", "size", "level", "mode": "push" or
// "blocks", "processes"): workload 15, one whole shuffle, mappers then reducers in `processes`
// processes each: {"end_to_end_seconds", "write_seconds", "read_seconds"}.
Result<Json> BlockmgrShuffleTask(const Json& task);
// Redis ("port", "maps", "partitions", "size", "processes"): the same shuffle at Redis's best
// shape: {"end_to_end_seconds", "read_seconds", "best_shape", per-shape figures}.
Result<Json> RedisShuffleTask(const Json& task);

// ---- shared by the tasks ----

// Runs `run(0)` .. `run(processes - 1)` in forked child processes at once and waits for all;
// fails when any failed. Nothing holding threads (a ZeroMQ context) may exist when called.
Status RunInProcesses(int processes, const std::function<Status(int process)>& run);

Duration DurationOf(const Json& task);

// Times `put(key)` over keys 0, 1, ... ids-1, 0, ... and then `get(key)` over the keys put,
// in a scattered order; returns
// {"put_bytes_per_s", "get_bytes_per_s", "put_ops", "get_ops"} for values of `size` bytes.
Result<Json> MeasureTransfer(const Duration& duration, uint64_t size, int ids,
                             const std::function<Status(int key)>& put,
                             const std::function<Status(int key)>& get);

// `size` bytes of a repeatable pattern, every page touched (so no timing pays first-touch faults).
std::vector<std::byte> PatternBytes(uint64_t size);

}  // namespace bm::bench
