#include "bench/tasks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <thread>

namespace bm::bench {

Result<Json> RunClientTask(const Json& task) {
  using TaskFn = Result<Json> (*)(const Json&);
  static const std::map<std::string, TaskFn> kTasks = {
      {"bm_transfer", &BlockmgrTransferTask},
      {"bm_small_gets", &BlockmgrSmallGetsTask},
      {"bm_big_block", &BlockmgrBigBlockTask},
      {"disk_store_formats", &DiskStoreFormatsTask},
      {"file_write_sync", &FileWriteSyncTask},
      {"master_load", &MasterLoadTask},
      {"worker_gets", &WorkerGetsTask},
      {"bm_put_many", &BlockmgrPutManyTask},
      {"bm_get_latency", &BlockmgrGetLatencyTask},
      {"redis_transfer", &RedisTransferTask},
      {"redis_small_gets", &RedisSmallGetsTask},
      {"memcached_transfer", &MemcachedTransferTask},
      {"zmq_transfer", &ZmqTransferTask},
      {"zmq_round_trips", &ZmqRoundTripsTask},
      {"memcpy", &MemcpyTask},
      {"curve_crypto", &CurveCryptoTask},
      {"bm_shuffle_fetch", &BlockmgrShuffleFetchTask},
      {"bm_lookups", &BlockmgrLookupsTask},
      {"bm_recompute", &BlockmgrRecomputeTask},
      {"redis_shuffle_fetch", &RedisShuffleFetchTask},
      {"bm_shuffle", &BlockmgrShuffleTask},
      {"redis_shuffle", &RedisShuffleTask},
  };
  const std::string name = task.value("task", "");
  auto found = kTasks.find(name);
  if (found == kTasks.end()) return InvalidArgumentError("unknown client task '" + name + "'");
  try {
    return found->second(task);
  } catch (const Json::exception& e) {
    return InvalidArgumentError("task " + name + ": bad parameters: " + e.what());
  }
}

int64_t WaitForCommonStart(int64_t start_at_ms) {
  using WallClock = std::chrono::system_clock;
  const WallClock::time_point start_at{std::chrono::milliseconds(start_at_ms)};
  const int64_t late_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(WallClock::now() - start_at).count();
  std::this_thread::sleep_until(start_at);
  return std::max<int64_t>(0, late_ms);
}

Duration DurationOf(const Json& task) {
  return Duration{task.value("seconds", 1.0), task.value("min_ops", uint64_t{3})};
}

Result<Json> MeasureTransfer(const Duration& duration, uint64_t size, int ids,
                             const std::function<Status(int key)>& put,
                             const std::function<Status(int key)>& get) {
  int next = 0;
  BM_ASSIGN_OR_RETURN(Timed puts, RunTimed(duration, [&] { return put(next++ % ids); }));
  // Reads visit the stored keys in a scattered order (a stride coprime with their count).
  const uint64_t stored = static_cast<uint64_t>(std::min(next, ids));
  uint64_t stride = 7919;
  while (std::gcd(stride, stored) != 1) ++stride;
  uint64_t read = 0;
  BM_ASSIGN_OR_RETURN(Timed gets, RunTimed(duration, [&] {
                        return get(static_cast<int>((read++ * stride) % stored));
                      }));
  const double bytes = static_cast<double>(size);
  return Json{{"put_bytes_per_s", puts.per_second() * bytes},
              {"get_bytes_per_s", gets.per_second() * bytes},
              {"put_ops", puts.ops},
              {"get_ops", gets.ops}};
}

std::vector<std::byte> PatternBytes(uint64_t size) {
  std::vector<std::byte> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + 7) >> 3);
  return bytes;
}

Result<Json> MemcpyTask(const Json& task) {
  const uint64_t size = task.at("size").get<uint64_t>();
  std::vector<std::byte> from = PatternBytes(size);
  std::vector<std::byte> to(size, std::byte{1});
  BM_ASSIGN_OR_RETURN(Timed copies, RunTimed(DurationOf(task), [&] {
                        std::memcpy(to.data(), from.data(), size);
                        return Status::Ok();
                      }));
  if (to != from) return InternalError("memcpy produced different bytes");
  return Json{{"bytes_per_s", copies.per_second() * static_cast<double>(size)}};
}

}  // namespace bm::bench
