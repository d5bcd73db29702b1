#include "bench/workloads.h"

#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "bench/proc_info.h"
#include "bench/tool_peers.h"
#include "common/core/byte_size.h"
#include "common/core/protocol.h"
#include "common/security/curve_keys.h"
#include "tests/support/standby_cluster.h"
#include "tests/support/zookeeper_server.h"

namespace bm::bench {
namespace {

using Json = nlohmann::json;
constexpr double kGB = 1e9;
constexpr double kMB = 1e6;
constexpr double kMiB = 1 << 20;

// `task` with one more parameter.
Json With(Json task, const std::string& key, Json value) {
  task[key] = std::move(value);
  return task;
}

void Progress(const std::string& what) { std::cerr << "bm-bench: " << what << std::endl; }

// One workload's context: the config, the report, and how to run a client task.
class Runner {
 public:
  Runner(const BenchConfig& config, Report& report) : config_(config), report_(report) {}

  const BenchConfig& config() const { return config_; }
  Report& report() { return report_; }

  // Runs `task` in a client process of its own (`bm-bench --client`); its figures, or why not.
  // `bin_dir`: another build's bm-bench runs the task (empty: this one's).
  Result<Json> Client(Json task, const std::string& bin_dir = "") {
    task["seconds"] = config_.seconds;
    const std::string log = config_.env.work_dir + "/clients.log";
    BM_ASSIGN_OR_RETURN(
        testing::CommandResult run,
        testing::RunCommand(testing::Command{
            .binary = (bin_dir.empty() ? config_.env.bin_dir : bin_dir) + "/bm-bench",
            .args = {"--client", task.dump()},
            .stderr_log = log,
            .timeout = std::chrono::minutes(15)}));
    Json result = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
    if (run.exit_code != 0 || result.is_discarded() || !result.value("ok", false)) {
      std::string why = result.is_object() ? result.value("error", "") : "";
      return InternalError("client task " + task.value("task", "") + " failed (exit " +
                           std::to_string(run.exit_code) + "): " + why + " (see " + log + ")");
    }
    return result;
  }

  // Runs `task` in bench/python_transfer.py (the blockmgr Python module) under Debian's
  // python3; its figures, or why not.
  Result<Json> PythonClient(Json task) {
    task["seconds"] = config_.seconds;
    if (!std::filesystem::exists(BM_BENCH_PYTHON) ||
        !std::filesystem::exists(std::string(BM_BENCH_PYTHON_PATH) + "/blockmgr/__init__.py")) {
      return UnavailableError(std::string("the blockmgr Python module is not built for ") +
                              BM_BENCH_PYTHON + " (needs pybind11-dev and python3-dev)");
    }
    const std::string log = config_.env.work_dir + "/clients.log";
    BM_ASSIGN_OR_RETURN(
        testing::CommandResult run,
        testing::RunCommand(testing::Command{
            .binary = BM_BENCH_PYTHON,
            .args = {BM_BENCH_PYTHON_SCRIPT, "--path", BM_BENCH_PYTHON_PATH, task.dump()},
            .stderr_log = log,
            .timeout = std::chrono::minutes(15)}));
    Json result = Json::parse(run.out, nullptr, /*allow_exceptions=*/false);
    if (run.exit_code != 0 || result.is_discarded() || !result.value("ok", false)) {
      return InternalError("python task failed (exit " + std::to_string(run.exit_code) + ") (see " +
                           log + ")");
    }
    return result;
  }

  // The figure `key` of a task result scaled by 1/unit, or nothing (and a note) when the task
  // failed.
  std::optional<double> Figure(const Result<Json>& result, const std::string& key, double unit,
                               const std::string& what) {
    if (!result.ok()) {
      Note(what + ": " + result.status().message());
      return std::nullopt;
    }
    return result->at(key).get<double>() / unit;
  }

  void Note(const std::string& note) {
    Progress(note);
    report_.AddNote(note);
  }

  void Add(const std::string& workload, const std::string& metric, std::optional<double> value,
           const std::string& peer, std::optional<double> peer_value,
           std::optional<double> target = std::nullopt, Better better = Better::kHigher,
           const std::string& note = "") {
    report_.Add(Row{workload, metric, value, peer, peer_value, target, better, note});
  }

 private:
  const BenchConfig& config_;
  Report& report_;
};

// The median of each number over the rounds that succeeded (the first failure when none did).
// Medians, not means: on a shared machine a round that ran beside someone else's burst is an
// outlier to drop, not a sample to average in.
Result<Json> Median(const std::vector<Result<Json>>& rounds) {
  std::vector<const Json*> ok;
  for (const Result<Json>& round : rounds) {
    if (round.ok()) ok.push_back(&*round);
  }
  if (ok.empty()) return rounds.empty() ? InternalError("no rounds ran") : rounds.front().status();
  Json out = *ok.front();
  for (auto& [key, value] : out.items()) {
    if (!value.is_number()) continue;
    std::vector<double> values;
    for (const Json* round : ok) values.push_back(round->at(key).get<double>());
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    value = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  }
  return out;
}

// Runs the measurements `config.rounds` times, interleaved (a, b, c, a, b, c, ...) so that
// blockmgr and its peers meet the same background load; returns each one's median.
std::vector<Result<Json>> Interleaved(const BenchConfig& config,
                                      const std::vector<std::function<Result<Json>()>>& measure) {
  std::vector<std::vector<Result<Json>>> rounds(measure.size());
  for (int round = 0; round < std::max(1, config.rounds); ++round) {
    for (size_t i = 0; i < measure.size(); ++i) rounds[i].push_back(measure[i]());
  }
  std::vector<Result<Json>> medians;
  for (const auto& results : rounds) medians.push_back(Median(results));
  return medians;
}

// Each measurement of the disk starts once the page cache's dirty pages are written out
// (sync(2)), so none pays for the writeback of the one before it: on this machine a buffered
// writer measured right after another ran at a third of its pace alone.
std::vector<std::function<Result<Json>()>> DiskSettled(
    std::vector<std::function<Result<Json>()>> measure) {
  for (std::function<Result<Json>()>& m : measure) {
    m = [inner = std::move(m)] {
      ::sync();
      return inner();
    };
  }
  return measure;
}

// A measurement against a peer server that could not be started.
std::function<Result<Json>()> Failed(Status status) {
  return [status] { return Result<Json>(status); };
}

// ---- workload 0: the machine ----

std::optional<double> MeasureMemcpy(Runner& runner) {
  Progress("memcpy bandwidth");
  Result<Json> copy = runner.Client({{"task", "memcpy"}, {"size", 256u << 20}});
  return runner.Figure(copy, "bytes_per_s", kGB, "memcpy");
}

// ---- workloads 1-4: one cluster ----

void LargeBlocks(Runner& runner, BlockmgrCluster& cluster, std::optional<double> memcpy) {
  const uint64_t size = 64u << 20;
  const BenchEnv& env = runner.config().env;
  Progress("1: 64 MiB blocks (blockmgr, raw ZeroMQ, iperf3, Redis)");
  Result<PeerServer> zmq_server = StartRawZmqServer(env, size);
  Result<PeerServer> redis_server = StartRedis(env);
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] {
         return runner.Client({{"task", "bm_transfer"}, {"master", cluster.master_endpoint()},
                               {"size", size}, {"ids", 4}, {"rdd", 1}, {"level", "MEMORY_ONLY"}});
       },
       !zmq_server.ok() ? Failed(zmq_server.status())
                        : [&] {
                            return runner.Client(
                                {{"task", "zmq_transfer"},
                                 {"endpoint", "tcp://127.0.0.1:" + std::to_string(zmq_server->port)},
                                 {"size", size}});
                          },
       [&]() -> Result<Json> {
         BM_ASSIGN_OR_RETURN(double rate, RunIperf(env, runner.config().seconds));
         return Json{{"bytes_per_s", rate}};
       },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] {
                              return runner.Client({{"task", "redis_transfer"},
                                                    {"port", redis_server->port},
                                                    {"size", size},
                                                    {"ids", 4}});
                            }});
  const Result<Json>& bm = results[0];
  const Result<Json>& zmq = results[1];
  const std::optional<double> iperf = runner.Figure(results[2], "bytes_per_s", kGB, "iperf3");
  const Result<Json>& redis = results[3];
  for (const char* op : {"get", "put"}) {
    const std::string key = std::string(op) + "_bytes_per_s";
    const std::string workload = std::string("1. 64 MiB ") + op + ", memory";
    std::optional<double> ours = runner.Figure(bm, key, kGB, "blockmgr 64 MiB");
    const bool get = std::string(op) == "get";
    // Issue 45's put target: 0.8 of the transport with the end-to-end digests on both sides.
    runner.Add(workload, "GB/s", ours, "raw ZeroMQ 1 MiB frames",
               runner.Figure(zmq, key, kGB, "raw ZeroMQ"), get ? 0.6 : 0.8);
    runner.Add(workload, "GB/s", ours, "iperf3 1 stream", iperf);
    runner.Add(workload, "GB/s", ours, get ? "redis GET" : "redis SET",
               runner.Figure(redis, key, kGB, "redis 64 MiB"),
               get ? std::optional(5.0) : std::nullopt);
    runner.Add(workload, "GB/s", ours, "memcpy", memcpy);
  }
}

void MediumBlocks(Runner& runner, BlockmgrCluster& cluster) {
  const uint64_t size = 1u << 20;
  const int ids = 64;
  const BenchEnv& env = runner.config().env;
  Progress("2: 1 MiB blocks (blockmgr, Redis, memcached)");
  Result<PeerServer> redis_server = StartRedis(env);
  Result<PeerServer> memcached_server = StartMemcached(env, 4, 1024);
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] {
         return runner.Client({{"task", "bm_transfer"}, {"master", cluster.master_endpoint()},
                               {"size", size}, {"ids", ids}, {"rdd", 2},
                               {"level", "MEMORY_ONLY"}, {"min_ops", 20}});
       },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] {
                              return runner.Client({{"task", "redis_transfer"},
                                                    {"port", redis_server->port},
                                                    {"size", size},
                                                    {"ids", ids},
                                                    {"min_ops", 20}});
                            },
       !memcached_server.ok() ? Failed(memcached_server.status())
                              : [&] {
                                  return runner.Client({{"task", "memcached_transfer"},
                                                        {"port", memcached_server->port},
                                                        {"size", size},
                                                        {"ids", ids},
                                                        {"min_ops", 20}});
                                },
       [&] {
         return runner.Client({{"task", "bm_transfer"}, {"master", cluster.master_endpoint()},
                               {"size", size}, {"ids", ids}, {"rdd", 5},
                               {"level", "MEMORY_ONLY"}, {"min_ops", 20},
                               {"put_api", "chunks"}});
       }});
  const Result<Json>& bm = results[0];
  const Result<Json>& redis = results[1];
  const Result<Json>& memcached = results[2];
  const Result<Json>& bm_chunks = results[3];
  for (const char* op : {"get", "put"}) {
    const std::string key = std::string(op) + "_bytes_per_s";
    const std::string workload = std::string("2. 1 MiB ") + op + ", memory";
    std::optional<double> ours = runner.Figure(bm, key, kGB, "blockmgr 1 MiB");
    runner.Add(workload, "GB/s", ours, "redis", runner.Figure(redis, key, kGB, "redis 1 MiB"), 1.2);
    runner.Add(workload, "GB/s", ours, "memcached",
               runner.Figure(memcached, key, kGB, "memcached 1 MiB"), 1.0);
  }
  runner.Add(
      "2'. 1 MiB put, memory, Client::PutChunks", "GB/s",
      runner.Figure(bm_chunks, "put_bytes_per_s", kGB, "blockmgr 1 MiB PutChunks"), "redis",
      runner.Figure(redis, "put_bytes_per_s", kGB, "redis 1 MiB"), std::nullopt, Better::kHigher,
      "informative: the bytes held in a shared chunk and sent as they are; Put sends the "
      "caller's span as it is too (frames lent from it), where hiredis copies into its buffer");
}

// 9: the cost of CURVE (encryption and authentication on every connection): the same 64 MiB and
// 1 MiB transfers against a cluster with keys and one without, interleaved.
void CurveBlocks(Runner& runner, BlockmgrCluster& plain) {
  Progress("9: 64 MiB and 1 MiB blocks with CURVE keys (blockmgr with and without keys)");
  if (!CurveAvailable()) {
    runner.Note("9. skipped: libzmq was built without CURVE");
    return;
  }
  Result<std::unique_ptr<BlockmgrCluster>> secure = BlockmgrCluster::Start(
      runner.config().env, {.name = "curve", .workers = 1, .worker_memory = "1GiB", .keys = true});
  if (!secure.ok()) {
    runner.Note("9. blockmgr cluster with keys: " + secure.status().message());
    return;
  }
  for (const auto& [size, ids, label] :
       {std::tuple<uint64_t, int, const char*>{64u << 20, 4, "64 MiB"},
        std::tuple<uint64_t, int, const char*>{1u << 20, 64, "1 MiB"}}) {
    auto task = [&, size = size, ids = ids](BlockmgrCluster& cluster, uint64_t rdd) {
      return [&runner, &cluster, size, ids, rdd] {
        const ClientOptions options = cluster.ClientOptionsFor();
        return runner.Client({{"task", "bm_transfer"},
                              {"master", options.master_address},
                              {"key", options.key_file},
                              {"master_key", options.master_key_file},
                              {"size", size},
                              {"ids", ids},
                              {"rdd", rdd},
                              {"level", "MEMORY_ONLY"},
                              {"min_ops", 20}});
      };
    };
    const int redis_requests = size > (1u << 20) ? 10 : 200;
    std::vector<Result<Json>> results =
        Interleaved(runner.config(),
                    {task(**secure, 71), task(plain, 72),
                     [&runner, size = size, redis_requests]() -> Result<Json> {
                       BM_ASSIGN_OR_RETURN(RedisTlsRates rates,
                                           RunRedisTls(runner.config().env, size, redis_requests));
                       return Json{{"put_bytes_per_s", rates.set_bytes_per_s},
                                   {"get_bytes_per_s", rates.get_bytes_per_s}};
                     },
                     [&runner] {
                       return runner.Client({{"task", "curve_crypto"},
                                             {"size", static_cast<uint64_t>(kChunkBytes)},
                                             {"min_ops", 20}});
                     }});
    // What the cipher alone allows one connection: every frame (kChunkBytes) is sealed by the
    // sender's I/O thread and opened by the receiver's. A 64 MiB transfer overlaps the two (on
    // two free cores, the slower one bounds it); a 1 MiB block is one frame, sealed and then
    // opened, in turn.
    std::optional<double> ceiling;
    if (results[3].ok()) {
      const double seal = results[3]->at("seal_bytes_per_s").get<double>();
      const double open = results[3]->at("open_bytes_per_s").get<double>();
      ceiling = (size > kChunkBytes ? std::min(seal, open) : 1 / (1 / seal + 1 / open)) / kGB;
    } else {
      runner.Note("9. libsodium: " + results[3].status().message());
    }
    for (const char* op : {"get", "put"}) {
      const std::string key = std::string(op) + "_bytes_per_s";
      const std::string workload = std::string("9. ") + label + " " + op + ", memory, CURVE keys";
      const std::optional<double> ours =
          runner.Figure(results[0], key, kGB, std::string("CURVE ") + label);
      runner.Add(workload, "GB/s", ours, "blockmgr without keys",
                 runner.Figure(results[1], key, kGB, std::string("plaintext ") + label), 0.5,
                 Better::kHigher,
                 "bounded by libsodium's per-frame encryption (a copy per frame: no zero-copy)");
      runner.Add(workload, "GB/s", ours,
                 std::string(op) == "get" ? "redis TLS GET (redis-benchmark)"
                                          : "redis TLS SET (redis-benchmark)",
                 runner.Figure(results[2], key, kGB, std::string("redis TLS ") + label), 1.0);
      runner.Add(workload, "GB/s", ours,
                 size > kChunkBytes ? "cipher bound: libsodium seal|open, 1 core each"
                                    : "cipher bound: libsodium seal+open, in turn",
                 ceiling, std::nullopt, Better::kHigher,
                 "informative: XSalsa20-Poly1305 alone on 1 MiB frames, no ZeroMQ, no copies");
    }
  }
}

// 2''. The same 1 MiB gets on a cluster serving --http, alone and while a scraper GETs the
// master's /metrics and storage page and the worker's /metrics 20 times a second: HTTP runs on
// threads of its own and must not slow block traffic.
void GetsWhileScraped(Runner& runner) {
  const uint64_t size = 1u << 20;
  const BenchEnv& env = runner.config().env;
  Progress("2'': 1 MiB gets while the status pages are scraped 20 times a second");
  Result<std::unique_ptr<BlockmgrCluster>> started = BlockmgrCluster::Start(
      env, {.name = "scraped", .workers = 1, .worker_memory = "1GiB", .http = true});
  if (!started.ok()) {
    runner.Note("2'': blockmgr cluster with --http: " + started.status().message());
    return;
  }
  BlockmgrCluster& cluster = **started;
  const Json task{{"task", "bm_transfer"},
                  {"master", cluster.master_endpoint()},
                  {"size", size},
                  {"ids", 64},
                  {"rdd", 6},
                  {"level", "MEMORY_ONLY"},
                  {"min_ops", 20}};
  const std::string scraper_log = env.work_dir + "/scraper.log";
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] { return runner.Client(task); },
       [&]() -> Result<Json> {
         const std::string urls = cluster.master_http() + "/metrics," + cluster.master_http() +
                                  "/storage," + cluster.worker_http(0) + "/metrics";
         std::filesystem::remove(scraper_log);
         BM_ASSIGN_OR_RETURN(Process scraper,
                             Process::Spawn(env.bin_dir + "/bm-bench",
                                            {"--scrape", urls, "--scrape-hz", "20"}, scraper_log));
         auto scraping = [&] {
           std::ifstream in(scraper_log);
           std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
           return all.find("scraping") != std::string::npos;
         };
         if (!testing::WaitFor([&] { return !scraper.Running() || scraping(); },
                               std::chrono::seconds(10)) ||
             !scraper.Running()) {
           return UnavailableError("the scraper did not start; see " + scraper_log);
         }
         Result<Json> measured = runner.Client(task);
         if (!scraper.Running()) return UnavailableError("the scraper failed; see " + scraper_log);
         scraper.Stop();
         return measured;
       }});
  runner.Add("2''. 1 MiB get, memory, status pages scraped 20/s", "GB/s",
             runner.Figure(results[1], "get_bytes_per_s", kGB, "blockmgr 1 MiB, scraped"),
             "same, not scraped",
             runner.Figure(results[0], "get_bytes_per_s", kGB, "blockmgr 1 MiB, --http idle"), 0.95,
             Better::kHigher,
             "a scraper GETs the master's /metrics and /storage and the worker's /metrics");
}

void SmallGets(Runner& runner, BlockmgrCluster& cluster) {
  const uint64_t size = 4096;
  const BenchEnv& env = runner.config().env;
  Progress("3: 4 KiB gets (blockmgr, raw ZeroMQ round trips, Redis)");
  const Json bm_task{{"task", "bm_small_gets"},
                     {"master", cluster.master_endpoint()},
                     {"size", size},
                     {"ids", 1000},
                     {"rdd", 3},
                     {"min_ops", 100}};
  Result<PeerServer> zmq_server = StartRawZmqServer(env, 16 * size);
  Result<PeerServer> redis_server = StartRedis(env);
  const Json redis_task{{"task", "redis_small_gets"},
                        {"port", redis_server.ok() ? redis_server->port : 0},
                        {"size", size},
                        {"ids", 1000},
                        {"min_ops", 100}};
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] { return runner.Client(With(bm_task, "threads", 1)); },
       [&] { return runner.Client(With(With(bm_task, "threads", 16), "mode", "get_many")); },
       [&] { return runner.Client(With(bm_task, "threads", 16)); },
       [&] {
         // Runs after the one-at-a-time gets above stored the blocks.
         return runner.Client({{"task", "worker_gets"}, {"worker", cluster.worker_endpoint(0)},
                               {"size", size}, {"ids", 1000}, {"rdd", 3}, {"min_ops", 100}});
       },
       !zmq_server.ok() ? Failed(zmq_server.status())
                        : [&] {
                            return runner.Client(
                                {{"task", "zmq_round_trips"},
                                 {"endpoint", "tcp://127.0.0.1:" + std::to_string(zmq_server->port)},
                                 {"size", size},
                                 {"min_ops", 100}});
                          },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] { return runner.Client(With(redis_task, "pipeline", 1)); },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] { return runner.Client(With(redis_task, "pipeline", 16)); },
       [&] { return runner.Client(With(With(bm_task, "threads", 1), "location_cache", 0)); },
       !zmq_server.ok() ? Failed(zmq_server.status())
                        : [&] {
                            // The bytes of 16 blocks in one reply: GetMany's transport ceiling.
                            return runner.Client(
                                {{"task", "zmq_round_trips"},
                                 {"endpoint", "tcp://127.0.0.1:" + std::to_string(zmq_server->port)},
                                 {"size", 16 * size},
                                 {"min_ops", 100}});
                          }});
  const Result<Json>& bm_one = results[0];
  const Result<Json>& bm_many = results[1];
  const Result<Json>& bm_16 = results[2];
  const Result<Json>& worker_only = results[3];
  const Result<Json>& zmq = results[4];
  const Result<Json>& redis_one = results[5];
  const Result<Json>& redis_16 = results[6];
  const Result<Json>& bm_uncached = results[7];
  const Result<Json>& zmq_16 = results[8];
  std::optional<double> one = runner.Figure(bm_one, "ops_per_s", 1, "blockmgr 4 KiB gets");
  runner.Add("3a. 4 KiB get, one at a time", "ops/s", one, "raw ZeroMQ round trip",
             runner.Figure(zmq, "ops_per_s", 1, "raw ZeroMQ round trips"), 0.8);
  runner.Add("3a. 4 KiB get, one at a time", "ops/s", one, "redis GET",
             runner.Figure(redis_one, "ops_per_s", 1, "redis 4 KiB GET"));
  // Where a get's time goes: the worker's part alone (no master lookup) against the transport.
  runner.Add("3a'. 4 KiB getBlock to the worker, no lookup", "ops/s",
             runner.Figure(worker_only, "ops_per_s", 1, "worker getBlock"), "raw ZeroMQ round trip",
             runner.Figure(zmq, "ops_per_s", 1, "raw ZeroMQ round trips"), std::nullopt,
             Better::kHigher,
             "diagnostic: the worker's part of a get alone; a get whose location the client "
             "remembers is this, one whose location it does not is this plus a master lookup");
  runner.Add(
      "3a''. 4 KiB get, one at a time, no location cache", "ops/s",
      runner.Figure(bm_uncached, "ops_per_s", 1, "blockmgr 4 KiB gets, no cache"),
      "raw ZeroMQ round trip", runner.Figure(zmq, "ops_per_s", 1, "raw ZeroMQ round trips"),
      std::nullopt, Better::kHigher,
      "diagnostic: location_cache_entries = 0, every get a master lookup plus a worker read");
  const std::optional<double> redis_pipelined =
      runner.Figure(redis_16, "ops_per_s", 1, "redis 4 KiB GET -P 16");
  const std::optional<double> bm_batched =
      runner.Figure(bm_many, "ops_per_s", 1, "blockmgr 4 KiB GetMany x16");
  runner.Add("3b. 4 KiB get, 16 in flight", "ops/s", bm_batched, "redis GET -P 16", redis_pipelined,
             1.0, Better::kHigher,
             "blockmgr: Client::GetManyChunks of 16 ids, one getBlocks request (16 blocks in one "
             "reply frame); locations from the client's cache after the first pass over the ids");
  std::optional<double> zmq_16_blocks = runner.Figure(zmq_16, "ops_per_s", 1, "raw ZeroMQ 64 KiB");
  if (zmq_16_blocks) *zmq_16_blocks *= 16;
  runner.Add("3b. 4 KiB get, 16 in flight", "ops/s", bm_batched, "raw ZeroMQ 64 KiB round trip x16",
             zmq_16_blocks, 0.9, Better::kHigher,
             "the transport's ceiling for 16 blocks per round trip: raw 64 KiB request/reply "
             "round trips per second, times 16");
  runner.Add("3b'. 4 KiB get, 16 client threads", "ops/s",
             runner.Figure(bm_16, "ops_per_s", 1, "blockmgr 4 KiB gets x16 threads"),
             "redis GET -P 16", redis_pipelined, std::nullopt, Better::kHigher,
             "16 threads, one Client each, one shared ZeroMQ context");
}

// With --baseline-bin-dir, the gets and puts of 4 also run on that build's own master and worker
// (and its client), taking turns with this build's: the before/after of a change to the disk path.
void DiskBlocks(Runner& runner, BlockmgrCluster& cluster) {
  const uint64_t size = 1u << 20;
  const uint64_t large = 64u << 20;
  const BenchEnv& env = runner.config().env;
  Progress("4: 1 MiB and 64 MiB DISK_ONLY blocks (blockmgr, raw ZeroMQ, db_bench)");
  // The transport's ceiling: db_bench reads in-process, faster than any network path here.
  Result<PeerServer> zmq_server = StartRawZmqServer(env, large);
  auto zmq_transfer = [&](uint64_t bytes) -> std::function<Result<Json>()> {
    if (!zmq_server.ok()) return Failed(zmq_server.status());
    return [&runner, &zmq_server, bytes] {
      return runner.Client({{"task", "zmq_transfer"},
                            {"endpoint", "tcp://127.0.0.1:" + std::to_string(zmq_server->port)},
                            {"size", bytes}});
    };
  };
  const std::string baseline = runner.config().baseline_bin_dir;
  Result<std::unique_ptr<BlockmgrCluster>> before =
      baseline.empty()
          ? Result<std::unique_ptr<BlockmgrCluster>>(InvalidArgumentError("no --baseline-bin-dir"))
          : BlockmgrCluster::Start(env, {.name = "disk-baseline",
                                         .workers = 1,
                                         .worker_memory = "1GiB",
                                         .bin_dir = baseline});
  if (!baseline.empty() && !before.ok()) {
    runner.Note("4. baseline build: " + before.status().message());
  }
  // DISK_ONLY puts and gets on another cluster than `cluster` (by the client of `bin_dir`; empty:
  // this build's), a new RDD from `rdd` on each round.
  auto transfer_on = [&](const Result<std::unique_ptr<BlockmgrCluster>>& other,
                         const std::string& bin_dir, uint64_t bytes, int ids,
                         int rdd) -> std::function<Result<Json>()> {
    if (!other.ok()) return Failed(other.status());
    return [&runner, on = &other, bin_dir, bytes, ids, rdd, round = 0]() mutable {
      return runner.Client({{"task", "bm_transfer"},
                            {"master", on->value()->master_endpoint()},
                            {"size", bytes},
                            {"ids", ids},
                            {"rdd", rdd + round++},
                            {"level", "DISK_ONLY"},
                            {"min_ops", 20}},
                           bin_dir);
    };
  };
  auto baseline_transfer = [&](uint64_t bytes, int ids, int rdd) {
    return transfer_on(before, baseline, bytes, ids, rdd);
  };
  // The same worker with three disk directories (issue 30): new blocks go to the disk with the
  // most room, so puts spread over all three. On this machine the three are directories of one
  // physical disk: the row shows what the spreading costs or gains, no target.
  std::vector<std::string> three_disks;
  for (int d = 2; d <= 3; ++d) {
    const std::string dir = env.work_dir + "/three-disks-d" + std::to_string(d);
    std::filesystem::remove_all(dir);
    three_disks.insert(three_disks.end(), {"--disk-dir", dir});
  }
  Result<std::unique_ptr<BlockmgrCluster>> spread = BlockmgrCluster::Start(
      env,
      {.name = "three-disks", .workers = 1, .worker_memory = "1GiB", .worker_args = three_disks});
  if (!spread.ok()) runner.Note("4. three disks: " + spread.status().message());
  int round = 0;
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      DiskSettled(
          {[&] {
             // Enough ids that every put in the timed window writes a new block, as fillseq does;
             // a new RDD each round so no round replaces another's blocks.
             return runner.Client({{"task", "bm_transfer"},
                                   {"master", cluster.master_endpoint()},
                                   {"size", size},
                                   {"ids", 100000},
                                   {"rdd", 40 + round++},
                                   {"level", "DISK_ONLY"},
                                   {"min_ops", 20}});
           },
           [&] {
             // Enough puts that memtables are flushed and reads come from table files.
             return runner.Client({{"task", "disk_store_formats"},
                                   {"dir", runner.config().env.work_dir + "/formats-disk-store"},
                                   {"size", size},
                                   {"min_ops", 200}});
           },
           [&]() -> Result<Json> {
             BM_ASSIGN_OR_RETURN(DbBenchRates rates, RunDbBench(runner.config().env, size,
                                                                runner.config().db_bench_values));
             return Json{{"fillseq", rates.fillseq_bytes_per_s},
                         {"readrandom", rates.readrandom_bytes_per_s}};
           },
           zmq_transfer(size),
           [&] {
             // Puts replace the 4 ids: each get reads a block through the range read-ahead.
             return runner.Client({{"task", "bm_transfer"},
                                   {"master", cluster.master_endpoint()},
                                   {"size", large},
                                   {"ids", 4},
                                   {"rdd", 60 + round},
                                   {"level", "DISK_ONLY"}});
           },
           zmq_transfer(large), baseline_transfer(size, 100000, 40),
           baseline_transfer(large, 4, 60),
           [&] {
             // The filesystem's own pace for a 64 MiB block made durable, on the worker's
             // filesystem.
             return runner.Client({{"task", "file_write_sync"},
                                   {"dir", runner.config().env.work_dir + "/file-write-sync"},
                                   {"size", large},
                                   {"min_ops", 4}});
           },
           transfer_on(spread, "", size, 100000, 40),
           [&] {
             // What a writer of new 1 MiB files gets from the worker's filesystem (issue 45):
             // write and close, no sync (a put's promise is a process kill, not a power cut).
             return runner.Client({{"task", "file_write_sync"},
                                   {"dir", runner.config().env.work_dir + "/file-write-new"},
                                   {"size", size},
                                   {"sync", false},
                                   {"new_files", true},
                                   {"min_ops", 20}});
           }}));
  const Result<Json>& bm = results[0];
  const Result<Json>& formats = results[1];
  const Result<Json>& db = results[2];
  const Result<Json>& zmq = results[3];
  const Result<Json>& bm_large = results[4];
  const Result<Json>& zmq_large = results[5];
  const Result<Json>& file_sync = results[8];
  const Result<Json>& three = results[9];
  const Result<Json>& new_files = results[10];
  const std::optional<double> fill = runner.Figure(db, "fillseq", kMB, "db_bench");
  const std::optional<double> read = runner.Figure(db, "readrandom", kMB, "db_bench");
  const std::optional<double> get = runner.Figure(bm, "get_bytes_per_s", kMB, "disk get");
  runner.Add("4. 1 MiB DISK_ONLY put", "MB/s",
             runner.Figure(bm, "put_bytes_per_s", kMB, "disk put"), "db_bench fillseq", fill, 1.0);
  runner.Add("4. 1 MiB DISK_ONLY put", "MB/s",
             runner.Figure(bm, "put_bytes_per_s", kMB, "disk put"), "new 1 MiB files, write+close",
             runner.Figure(new_files, "write_bytes_per_s", kMB, "new files"), 0.9, Better::kHigher,
             "the machine's bound for new bytes: every put writes a new block, every peer write a "
             "new file on the same filesystem");
  runner.Add("4. 64 MiB DISK_ONLY put", "MB/s",
             runner.Figure(bm_large, "put_bytes_per_s", kMB, "disk put 64 MiB"),
             "write+fdatasync 64 MiB", runner.Figure(file_sync, "write_bytes_per_s", kMB, "file"),
             0.7, Better::kHigher,
             "a chunk file is not fsynced (the promise is a process kill, as RocksDB's unsynced "
             "log before it); the peer syncs every block");
  runner.Add("4. 1 MiB DISK_ONLY get", "MB/s", get, "raw ZeroMQ 1 MiB frames",
             runner.Figure(zmq, "get_bytes_per_s", kMB, "raw ZeroMQ 1 MiB"), 0.7);
  runner.Add("4. 1 MiB DISK_ONLY get", "MB/s", get, "db_bench readrandom", read, std::nullopt,
             Better::kHigher,
             "informative: db_bench reads in-process, faster than any network path here; the "
             "target is on the raw ZeroMQ row, the transport's ceiling");
  runner.Add("4. 64 MiB DISK_ONLY get", "MB/s",
             runner.Figure(bm_large, "get_bytes_per_s", kMB, "disk get 64 MiB"),
             "raw ZeroMQ 1 MiB frames",
             runner.Figure(zmq_large, "get_bytes_per_s", kMB, "raw ZeroMQ 64 MiB"));

  runner.Add("4. 1 MiB DISK_ONLY put, three disks", "MB/s",
             runner.Figure(three, "put_bytes_per_s", kMB, "three disks put"), "one disk",
             runner.Figure(bm, "put_bytes_per_s", kMB, "disk put"), std::nullopt, Better::kHigher,
             "informative: three --disk-dir directories of one physical disk here");
  runner.Add("4. 1 MiB DISK_ONLY get, three disks", "MB/s",
             runner.Figure(three, "get_bytes_per_s", kMB, "three disks get"), "one disk", get,
             std::nullopt, Better::kHigher,
             "informative: three --disk-dir directories of one physical disk here");
  if (before.ok()) {
    const Result<Json>& old = results[6];
    const Result<Json>& old_large = results[7];
    runner.Add("4b. baseline build: 1 MiB DISK_ONLY put", "MB/s",
               runner.Figure(old, "put_bytes_per_s", kMB, "baseline disk put"), "db_bench fillseq",
               fill, std::nullopt, Better::kHigher, "the --baseline-bin-dir build, same run");
    runner.Add("4b. baseline build: 1 MiB DISK_ONLY get", "MB/s",
               runner.Figure(old, "get_bytes_per_s", kMB, "baseline disk get"),
               "raw ZeroMQ 1 MiB frames",
               runner.Figure(zmq, "get_bytes_per_s", kMB, "raw ZeroMQ 1 MiB"), std::nullopt,
               Better::kHigher, "the --baseline-bin-dir build, same run");
    runner.Add("4b. baseline build: 64 MiB DISK_ONLY get", "MB/s",
               runner.Figure(old_large, "get_bytes_per_s", kMB, "baseline disk get 64 MiB"),
               "raw ZeroMQ 1 MiB frames",
               runner.Figure(zmq_large, "get_bytes_per_s", kMB, "raw ZeroMQ 64 MiB"), std::nullopt,
               Better::kHigher, "the --baseline-bin-dir build, same run");
  }
  // The disk store alone: chunk files against RocksDB values (the layout before them), then its
  // RocksDB formats against each other (DiskValueFormat).
  runner.Add("4s. DiskStore in-process 1 MiB put, chunk files", "MB/s",
             runner.Figure(formats, "files_put_bytes_per_s", kMB, "disk store formats"),
             "DiskStore with RocksDB values (before chunk files)",
             runner.Figure(formats, "plain_put_bytes_per_s", kMB, "disk store formats"), 1.0);
  runner.Add("4s. DiskStore in-process 1 MiB get, chunk files", "MB/s",
             runner.Figure(formats, "files_get_bytes_per_s", kMB, "disk store formats"),
             "DiskStore with RocksDB values (before chunk files)",
             runner.Figure(formats, "plain_get_bytes_per_s", kMB, "disk store formats"), 0.95,
             Better::kHigher, "unchanged or better (0.95: this machine's noise)");
  for (const char* op : {"put", "get"}) {
    const std::string o(op);
    runner.Add("4s. DiskStore in-process 1 MiB " + o + ", plain values", "MB/s",
               runner.Figure(formats, "plain_" + o + "_bytes_per_s", kMB, "disk store formats"),
               "DiskStore with blob files",
               runner.Figure(formats, "blob_" + o + "_bytes_per_s", kMB, "disk store formats"));
  }
}

// ---- workload 7: the shuffle fetch ----

// One reducer fetching many small blocks as fast as each system allows: blockmgr's GetMany of
// every id against Redis at its best shape (pipelined GETs or MGETs, several depths tried in
// the Redis task). The figure is the time of one whole fetch, lower is better.
void ShuffleFetch(Runner& runner, BlockmgrCluster& cluster) {
  const uint64_t size = 4096;
  const int ids = 10000;
  Progress(
      "7: shuffle fetch, 10,000 blocks of 4 KiB (blockmgr GetManyChunks, Redis GET -P / MGET)");
  Result<PeerServer> redis_server = StartRedis(runner.config().env);
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] {
         return runner.Client({{"task", "bm_shuffle_fetch"}, {"master", cluster.master_endpoint()},
                               {"size", size}, {"ids", ids}, {"rdd", 7}, {"min_ops", 5},
                               {"worker_pid", cluster.worker_pid(0)},
                               {"master_pid", cluster.master_pid()}});
       },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] {
                              return runner.Client({{"task", "redis_shuffle_fetch"},
                                                    {"port", redis_server->port},
                                                    {"size", size},
                                                    {"ids", ids},
                                                    {"depths", {16, 64, 256, 1024}},
                                                    {"min_ops", 5}});
                            }});
  const std::optional<double> ours =
      runner.Figure(results[0], "fetch_seconds", 1e-3, "blockmgr shuffle fetch");
  const std::optional<double> redis =
      runner.Figure(results[1], "fetch_seconds", 1e-3, "redis shuffle fetch");
  std::string note = "blockmgr: one Client::GetManyChunks of all 10,000 ids by a fresh client";
  if (results[1].ok()) {
    note += "; redis: its best of GET -P and MGET at depths 16-1024 (" +
            (*results[1])["best_shape"].get<std::string>() + ")";
  }
  runner.Add("7. shuffle fetch, 10,000 x 4 KiB", "ms", ours, "redis, best depth", redis, 1.0,
             Better::kLower, note);
  // Where blockmgr's time goes: the lookup alone, the reads alone (locations cached), and the
  // CPU each process spends per fetch (steadier than the wall clock on a shared machine).
  if (results[0].ok()) {
    const Json& bm = *results[0];
    auto cpu = [&](const std::string& phase) {
      return "CPU per fetch: client " + FormatNumber(bm.value(phase + "_cpu_ms_client", 0.0)) +
             " ms, worker " + FormatNumber(bm.value(phase + "_cpu_ms_worker", 0.0)) +
             " ms, master " + FormatNumber(bm.value(phase + "_cpu_ms_master", 0.0)) + " ms";
    };
    runner.Add("7'. shuffle fetch, locations cached (reads alone)", "ms",
               bm["cached_fetch_seconds"].get<double>() * 1e3, "redis, best depth", redis,
               std::nullopt, Better::kLower, "diagnostic; " + cpu("cached_fetch"));
    runner.Add("7''. shuffle fetch, the location lookup alone", "ms",
               bm["lookup_seconds"].get<double>() * 1e3, "none", std::nullopt, std::nullopt,
               Better::kLower, "diagnostic: Client::Locations of all 10,000 ids; " + cpu("lookup"));
    runner.Note("7. blockmgr " + cpu("fetch"));
  }
}

// ---- workload 5: the master alone ----

// Client processes looking up single ids at once: the master's capacity, as opposed to one
// client's round-trip latency.
const std::vector<int> kLookupClients = {4, 8};
// The concurrent row the single-lookup target (a master throughput figure) is read on.
constexpr int kTargetLookupClients = 8;
// Issue 45's goal for that row (issue 17's was 20k/s).
constexpr double kTargetLookupsPerSecond = 40000;

void MasterLoad(Runner& runner) {
  Progress("5: master lookups, reports and memory");
  // A long heartbeat timeout: the fake worker sends reports only.
  Result<std::unique_ptr<BlockmgrCluster>> cluster = BlockmgrCluster::Start(
      runner.config().env, {.name = "master-load", .workers = 0, .heartbeat_timeout_s = 3600});
  // The transport's floor for the concurrent lookups: a bare ZeroMQ ROUTER answering each
  // request at once.
  Result<PeerServer> zmq_server = StartRawZmqServer(runner.config().env, 4096);
  Json task{{"task", "master_load"},
            {"counts", runner.config().master_blocks},
            {"batch", 4096},
            {"concurrent_clients", kLookupClients},
            {"log", runner.config().env.work_dir + "/clients.log"},
            {"min_ops", 100}};
  if (cluster.ok()) {
    task["master"] = (*cluster)->master_endpoint();
    task["master_pid"] = (*cluster)->master_pid();
  }
  if (zmq_server.ok()) {
    task["raw_endpoint"] = "tcp://127.0.0.1:" + std::to_string(zmq_server->port);
    task["raw_pid"] = zmq_server->process.pid();
  } else {
    runner.Note("master load: no raw ZeroMQ peer: " + zmq_server.status().message());
  }
  Result<Json> load = cluster.ok() ? runner.Client(task) : Result<Json>(cluster.status());
  if (!load.ok()) runner.Note("master load: " + load.status().message());
  const std::string w = "5. master";
  runner.Add(
      w + ", reportBlocks of 1 update", "reports/s",
      load.ok() ? std::optional((*load)["single_reports_per_s"].get<double>()) : std::nullopt,
      "none", std::nullopt);
  for (uint64_t count : runner.config().master_blocks) {
    const std::string at = " @ " + std::to_string(count / 1'000'000) + "M blocks";
    const Json* figures = nullptr;
    if (load.ok() && (*load)["at"].contains(std::to_string(count))) {
      figures = &(*load)["at"][std::to_string(count)];
    }
    auto get = [&](const char* key) -> std::optional<double> {
      if (!figures || !figures->contains(key)) return std::nullopt;
      return (*figures)[key].get<double>();
    };
    // One client, one request at a time: bound by a ZeroMQ round trip (~7-10k/s on the
    // project's VM), so the latency view, not the master's capacity.
    runner.Add(w + " lookups, single, 1 client" + at, "lookups/s", get("lookups_single_per_s"),
               "target", 20000.0, std::nullopt, Better::kHigher,
               "one client process, one id per getLocations, one request at a time: round-trip "
               "latency, not master capacity");
    for (int clients : kLookupClients) {
      const std::string key = "lookups_single_" + std::to_string(clients) + "_clients";
      const std::optional<double> late = get((key + "_late_ms").c_str());
      std::string note = std::to_string(clients) +
                         " client processes at once, each one id per getLocations, one request "
                         "at a time; the sum of their rates (master capacity)";
      if (late && *late > 0) {
        note += "; the last client started " + std::to_string(static_cast<int>(*late)) + " ms late";
      }
      // Where a lookup's microseconds go: both sides share the machine's cores.
      const std::optional<double> master_cpu = get((key + "_master_cpu_us").c_str());
      const std::optional<double> client_cpu = get((key + "_client_cpu_us").c_str());
      if (master_cpu && client_cpu) {
        note += "; CPU per lookup: master " + FormatNumber(master_cpu) + " us, each client " +
                FormatNumber(client_cpu) + " us";
      }
      runner.Add(w + " lookups, single, " + std::to_string(clients) + " clients" + at, "lookups/s",
                 get((key + "_per_s").c_str()), "target", kTargetLookupsPerSecond,
                 clients == kTargetLookupClients ? std::optional(1.0) : std::nullopt,
                 Better::kHigher, note);
      if (clients != kTargetLookupClients) continue;
      // Issue 45's rows: the master's CPU per lookup, against the target and against a bare
      // ZeroMQ server's CPU per round trip under the same clients (what the transport alone
      // costs a server here: its I/O thread, the TCP stack, one wake-up each way).
      const std::optional<double> raw_cpu = get((key + "_raw_server_cpu_us").c_str());
      const std::optional<double> raw_client_cpu = get((key + "_raw_client_cpu_us").c_str());
      const std::optional<double> raw_rate = get((key + "_raw_per_s").c_str());
      const std::optional<double> raw_bytes = get((key + "_raw_reply_bytes").c_str());
      runner.Add(w + " CPU per single lookup, " + std::to_string(clients) + " clients" + at, "us",
                 master_cpu, "target", 10.0, 1.0, Better::kLower,
                 "from /proc, over the clients' common window");
      runner.Add(w + " CPU per single lookup, " + std::to_string(clients) + " clients" + at, "us",
                 master_cpu, "raw ZeroMQ server's CPU per round trip", raw_cpu, std::nullopt,
                 Better::kLower,
                 "diagnostic: the same " + std::to_string(clients) +
                     " client processes, one request at a time to a bare ROUTER answering " +
                     FormatNumber(raw_bytes) +
                     " bytes (a lookup's reply), right after the lookups; its rate " +
                     FormatNumber(raw_rate) + "/s, each client's CPU " +
                     FormatNumber(raw_client_cpu) + " us a round trip");
    }
    runner.Add(w + " lookups, batched 100" + at, "lookups/s", get("lookups_batched_per_s"),
               "target", 200000.0, 1.0);
    runner.Add(w + " block updates, batches of 4096" + at, "updates/s",
               get("batched_updates_per_s"), "none", std::nullopt);
    const bool ten_million = count >= 10'000'000;
    runner.Add(w + " RSS per tracked block" + at, "bytes", get("bytes_per_block"), "target", 100.0,
               ten_million ? std::optional(1.0) : std::nullopt, Better::kLower);
  }
}

// ---- workload 6: one huge block on disk ----

void BigBlock(Runner& runner) {
  const uint64_t size = runner.config().big_block_bytes;
  const std::string w = "6. " + FormatBytes(size) + " DISK_ONLY block";
  struct statvfs fs {};
  if (statvfs(runner.config().env.work_dir.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    // The write-ahead log and the flushed tables each hold a copy for a while.
    if (free_bytes < 3 * size) {
      runner.Note(w + " skipped: " + FormatBytes(free_bytes) + " free in " +
                  runner.config().env.work_dir + ", need " + FormatBytes(3 * size));
      return;
    }
  }
  Progress("6: " + FormatBytes(size) + " DISK_ONLY block");
  // A worker of its own, so its idle RSS is not inflated by the other workloads.
  Result<std::unique_ptr<BlockmgrCluster>> cluster = BlockmgrCluster::Start(
      runner.config().env, {.name = "big-block", .workers = 1, .worker_memory = "256MiB"});
  if (!cluster.ok()) {
    runner.Note(w + ": " + cluster.status().message());
    return;
  }
  const pid_t worker = (*cluster)->worker_pid(0);
  const std::optional<uint64_t> worker_idle = ProcStatusBytes(worker, "VmRSS");
  ResetPeakRss(worker);
  Result<Json> run = runner.Client({{"task", "bm_big_block"},
                                    {"master", (*cluster)->master_endpoint()},
                                    {"size", size},
                                    {"rdd", 6}});
  const std::optional<uint64_t> worker_peak = ProcStatusBytes(worker, "VmHWM");
  if (!run.ok()) {
    runner.Note(w + ": " + run.status().message());
    return;
  }
  const bool exact = (*run)["byte_exact"].get<bool>();
  runner.Add(w + ", byte-exact", "1 = yes", exact ? 1.0 : 0.0, "target", 1.0, 1.0);
  runner.Add(w + " put", "MB/s", (*run)["put_bytes_per_s"].get<double>() / kMB, "none",
             std::nullopt);
  runner.Add(w + " get", "MB/s", (*run)["get_bytes_per_s"].get<double>() / kMB, "none",
             std::nullopt);
  std::optional<double> worker_growth;
  if (worker_idle && worker_peak) {
    worker_growth = static_cast<double>(*worker_peak - std::min(*worker_peak, *worker_idle)) / kMiB;
  }
  runner.Add(w + ", worker peak RSS above idle", "MiB", worker_growth, "target", 256.0, 1.0,
             Better::kLower);
  const uint64_t client_peak = (*run)["client_peak_rss"].get<uint64_t>();
  const uint64_t client_idle = (*run)["client_idle_rss"].get<uint64_t>();
  runner.Add(w + ", client peak RSS above idle", "MiB",
             static_cast<double>(client_peak - std::min(client_peak, client_idle)) / kMiB, "target",
             256.0, 1.0, Better::kLower);
}

// ---- workload 8: the Python client ----

// blockmgr's Python module against the C++ client it wraps, same blocks, same cluster, taking
// turns. A Python get hands the caller the whole block (a Buffer), so it is compared with
// Client::Get; the C++ rows of workloads 1-2 count the bytes where they were received
// (GetTo), which is shown beside it, informative.
void PythonClient(Runner& runner, BlockmgrCluster& cluster) {
  Progress("8: the Python client (64 MiB and 1 MiB blocks, against the C++ client)");
  struct Shape {
    const char* name;
    uint64_t size;
    int ids;
    uint64_t rdd;  // the first of three: Python, C++ whole gets, C++ counted gets
    double get_target;
    double put_target;
  };
  for (const Shape& shape :
       {Shape{"64 MiB", 64u << 20, 4, 70, 0.9, 0.9}, Shape{"1 MiB", 1u << 20, 64, 73, 0.8, 0.0}}) {
    const Json task{{"task", "bm_transfer"},  {"master", cluster.master_endpoint()},
                    {"size", shape.size},     {"ids", shape.ids},
                    {"level", "MEMORY_ONLY"}, {"min_ops", 20}};
    std::vector<Result<Json>> results = Interleaved(
        runner.config(),
        {[&] { return runner.PythonClient(With(task, "rdd", shape.rdd)); },
         [&] { return runner.Client(With(With(task, "rdd", shape.rdd + 1), "get_api", "whole")); },
         [&] { return runner.Client(With(task, "rdd", shape.rdd + 2)); }});
    const std::string size = shape.name;
    auto figure = [&](size_t i, const char* key, const std::string& what) {
      return runner.Figure(results[i], key, kGB, what + " " + size);
    };
    const std::optional<double> py_get = figure(0, "get_bytes_per_s", "python");
    runner.Add("8. Python " + size + " get, memory", "GB/s", py_get, "C++ Client::Get",
               figure(1, "get_bytes_per_s", "C++ Get"), shape.get_target);
    runner.Add("8. Python " + size + " get, memory", "GB/s", py_get,
               "C++ Client::GetTo, bytes counted in place",
               figure(2, "get_bytes_per_s", "C++ GetTo"), std::nullopt, Better::kHigher,
               "informative: the Python get also copies the block out of the received frames "
               "into one buffer the caller keeps");
    const std::optional<double> target =
        shape.put_target > 0 ? std::optional(shape.put_target) : std::nullopt;
    runner.Add("8. Python " + size + " put, memory", "GB/s", figure(0, "put_bytes_per_s", "python"),
               "C++ Client::Put", figure(2, "put_bytes_per_s", "C++ Put"), target);
  }
}

// ---- workload 10: small gets while a put spills ----

struct SpillRun {
  Result<Json> quiet = InternalError("not run");     // gets with nothing else going on
  Result<Json> spilling = InternalError("not run");  // gets while 2 GiB is put and spilled
  std::optional<bool> worker_dropped;                // by the master, for a missed heartbeat
};

// A worker with a 256 MiB budget and a 1 s heartbeat timeout: one client times 4 KiB memory
// gets while another puts 32 blocks of 64 MiB MEMORY_AND_DISK, each in an RDD of its own, so
// that every put past the first four evicts (and spills) the one before.
SpillRun MeasureGetsDuringSpills(Runner& runner, const std::string& name,
                                 const std::string& worker_binary) {
  const BenchEnv& env = runner.config().env;
  SpillRun run;
  Result<std::unique_ptr<BlockmgrCluster>> started =
      BlockmgrCluster::Start(env, {.name = name,
                                   .workers = 1,
                                   .worker_memory = "256MiB",
                                   .heartbeat_timeout_s = 1,
                                   .worker_binary = worker_binary});
  if (!started.ok()) {
    run.quiet = run.spilling = started.status();
    return run;
  }
  BlockmgrCluster& cluster = **started;
  const Json gets{{"task", "bm_get_latency"},
                  {"master", cluster.master_endpoint()},
                  {"size", 4096},
                  {"ids", 64}};
  Json quiet = gets;
  quiet["rdd"] = 500;
  quiet["max_seconds"] = 3;
  run.quiet = runner.Client(quiet);

  const std::string done = env.work_dir + "/" + name + "-puts-done";
  std::filesystem::remove(done);
  const Json puts{{"task", "bm_put_many"}, {"master", cluster.master_endpoint()},
                  {"size", 64u << 20},     {"count", 32},
                  {"rdd", 1000},           {"level", "MEMORY_AND_DISK"},
                  {"done_file", done}};
  Result<Process> putter = Process::Spawn(env.bin_dir + "/bm-bench", {"--client", puts.dump()},
                                          env.work_dir + "/" + name + "-putter.log");
  if (!putter.ok()) {
    run.spilling = putter.status();
    return run;
  }
  Json spilling = gets;
  spilling["rdd"] = 501;
  spilling["stop_file"] = done;
  spilling["max_seconds"] = 300;
  run.spilling = runner.Client(spilling);
  if (!testing::WaitFor([&] { return !putter->Running(); }, std::chrono::seconds(300))) {
    putter->Stop();
  }
  if (!std::filesystem::exists(done)) {
    run.spilling = InternalError("the putter did not finish; see " + name + "-putter.log");
  }
  std::ifstream log(env.work_dir + "/" + name + "-master.log");
  const std::string all((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  run.worker_dropped = all.find("dropped worker") != std::string::npos;
  return run;
}

void GetsDuringSpills(Runner& runner) {
  Progress("10: 4 KiB gets while 2 GiB of MEMORY_AND_DISK puts spill from a 256 MiB worker");
  const std::string baseline = runner.config().baseline_worker;
  const SpillRun now = MeasureGetsDuringSpills(runner, "spill", "");
  std::optional<SpillRun> before;
  if (!baseline.empty()) before = MeasureGetsDuringSpills(runner, "spill-baseline", baseline);

  auto p99 = [&](const Result<Json>& result, const std::string& what) {
    return runner.Figure(result, "p99_us", 1e3, what);
  };
  auto add = [&](const std::string& label, const SpillRun& run) {
    runner.Add("10. 4 KiB get p99 while spilling" + label, "ms",
               p99(run.spilling, "spilling" + label), "same, no spill running",
               p99(run.quiet, "quiet" + label), 5.0, Better::kLower,
               "one client gets 4 KiB memory blocks while another puts 32 x 64 MiB "
               "MEMORY_AND_DISK into a 256 MiB worker");
    runner.Add("10. 4 KiB get, slowest while spilling" + label, "ms",
               runner.Figure(run.spilling, "max_us", 1e3, "spilling max" + label),
               "same, no spill running",
               runner.Figure(run.quiet, "max_us", 1e3, "quiet max" + label), std::nullopt,
               Better::kLower,
               "one get at a time: a stall of the worker's loop shows here whole, in p99 only "
               "as one slow get");
    runner.Add("10. worker kept by the master throughout (1 s heartbeat timeout)" + label,
               "1 = yes",
               run.worker_dropped.has_value() ? std::optional<double>(*run.worker_dropped ? 0 : 1)
                                              : std::nullopt,
               "target", 1.0, 1.0);
  };
  add("", now);
  if (before) add(" (baseline worker: " + baseline + ")", *before);
}

// ---- workload 11: what block digests cost ----

// The same transfers on this build and on a build from before digests (its own master, worker
// and client), taking turns: every put byte is digested by the client and checked by the
// worker, every get byte checked by the client.
void DigestCost(Runner& runner) {
  const std::string baseline = runner.config().baseline_bin_dir;
  if (baseline.empty()) {
    runner.Note(
        "11. digest cost skipped: it needs --baseline-bin-dir (a build from before digests)");
    return;
  }
  Progress("11: 64 MiB and 1 MiB transfers with digests against the build without them");
  const BenchEnv& env = runner.config().env;
  Result<std::unique_ptr<BlockmgrCluster>> now =
      BlockmgrCluster::Start(env, {.name = "digest", .workers = 1, .worker_memory = "1GiB"});
  Result<std::unique_ptr<BlockmgrCluster>> before = BlockmgrCluster::Start(
      env, {.name = "digest-baseline", .workers = 1, .worker_memory = "1GiB", .bin_dir = baseline});
  if (!now.ok() || !before.ok()) {
    runner.Note("11. digest cost: " + (now.ok() ? before : now).status().message());
    return;
  }
  // Gets twice: counting the bytes where they arrived (the reader never touches them, so the
  // client's check is the only pass over them), and with Client::Get, which hands the caller
  // the block in its own buffer, as a reader that keeps or uses the bytes does.
  for (const auto& [size, ids, label] :
       {std::tuple<uint64_t, int, const char*>{64u << 20, 4, "64 MiB"}, {1u << 20, 64, "1 MiB"}}) {
    for (const char* get_api : {"sink", "whole"}) {
      const bool whole = std::string(get_api) == "whole";
      auto task = [&, size = size, ids = ids](const BlockmgrCluster& cluster) {
        return Json{{"task", "bm_transfer"},
                    {"master", cluster.master_endpoint()},
                    {"size", size},
                    {"ids", ids},
                    {"rdd", 11},
                    {"level", "MEMORY_ONLY"},
                    {"get_api", get_api}};
      };
      std::vector<Result<Json>> results =
          Interleaved(runner.config(), {[&] { return runner.Client(task(**now)); },
                                        [&] { return runner.Client(task(**before), baseline); }});
      for (const char* op :
           whole ? std::vector<const char*>{"get"} : std::vector<const char*>{"put", "get"}) {
        const std::string key = std::string(op) + "_bytes_per_s";
        const std::string row = std::string("11. digest cost: ") + label + " " + op +
                                (whole ? " into the caller's buffer (Client::Get)" : "") +
                                ", memory";
        runner.Add(row, "GB/s",
                   runner.Figure(results[0], key, kGB, std::string("digests ") + label),
                   "same, build without digests",
                   runner.Figure(results[1], key, kGB, std::string("no digests ") + label), 0.95);
      }
    }
  }
}

}  // namespace

// ---- workload 12: standby masters ----

// The servers' CPU per put: `measure` (puts, reporting "put_ops"), with "<name>_cpu_us_per_put"
// added to its result for each group of processes, from their /proc CPU time around it.
std::function<Result<Json>()> WithServerCpu(
    std::function<Result<Json>()> measure,
    std::vector<std::pair<std::string, std::vector<pid_t>>> groups) {
  return [measure = std::move(measure), groups = std::move(groups)]() -> Result<Json> {
    auto cpu = [](const std::vector<pid_t>& pids) {
      double seconds = 0;
      for (pid_t pid : pids) seconds += ProcessCpuSeconds(pid);
      return seconds;
    };
    std::vector<double> before;
    for (const auto& group : groups) before.push_back(cpu(group.second));
    Result<Json> result = measure();
    if (!result.ok()) return result;
    const double puts = std::max(1.0, result->value("put_ops", 0.0));
    for (size_t i = 0; i < groups.size(); ++i) {
      (*result)[groups[i].first + "_cpu_us_per_put"] =
          (cpu(groups[i].second) - before[i]) * 1e6 / puts;
    }
    return result;
  };
}

// "leader 12 us, standby 34 us" from the "<name>_cpu_us_per_put" fields of a result.
std::string CpuPerPut(const Result<Json>& result, const std::vector<std::string>& names) {
  if (!result.ok()) return "-";
  std::string out;
  for (const std::string& name : names) {
    if (!out.empty()) out += ", ";
    out += name + " " + FormatNumber(result->value(name + "_cpu_us_per_put", 0.0)) + " us";
  }
  return out;
}

// Two masters under ZooKeeper against one master alone (both journaling, as a master that can
// be restarted without losing its metadata does): what standing by costs a lookup and a put,
// and how long a failover takes from kill -9 of the leader to the first lookup answered by the
// new one.
void Failover(Runner& runner) {
  Progress("12: standby masters (failover time; lookups and 1 MiB puts, two masters vs one)");
  if (!testing::ZooKeeperServer::Available()) {
    runner.Note("12. skipped: ZooKeeper is not installed (deploy/install-test-deps.sh)");
    return;
  }
  const BenchEnv& env = runner.config().env;
  Result<std::unique_ptr<BlockmgrCluster>> alone = BlockmgrCluster::Start(
      env, {.name = "failover-alone", .workers = 2, .worker_memory = "1GiB", .journal = true});
  const std::string dir = env.work_dir + "/failover-standby";
  std::filesystem::remove_all(dir);
  testing::StandbyCluster pair(
      {.masters = {"a", "b"}, .session_timeout_s = 1.5, .worker_memory = "1GiB", .dir = dir});
  Status started = pair.StartZooKeeper();
  std::unique_ptr<Client> watcher;
  if (started.ok()) {
    pair.StartMaster("a");
    watcher = std::make_unique<Client>(pair.ClientOptionsFor());
    if (!pair.WaitForLeader(*watcher, "a", std::chrono::seconds(30))) {
      started = UnavailableError("master a did not lead (see " + dir + "/master-a.log)");
    }
  }
  if (started.ok()) {
    pair.StartMaster("b");
    pair.StartWorker("w1");
    pair.StartWorker("w2");
    if (!pair.WaitForWorkers(*watcher, 2, std::chrono::seconds(30)) ||
        !pair.WaitForStandbyInSync(*watcher, std::chrono::seconds(30))) {
      started = UnavailableError("the standby pair did not come up (see " + dir + ")");
    }
  }
  if (!started.ok()) runner.Note("12. standby masters: " + started.message());
  auto task = [&](Json fields, const std::string& master) {
    fields["master"] = master;
    return runner.Client(std::move(fields));
  };
  const Json lookups{{"task", "bm_lookups"}, {"ids", 64}, {"rdd", 12}, {"min_ops", 100}};
  const Json puts{{"task", "bm_transfer"},  {"size", 1u << 20}, {"ids", 64}, {"rdd", 13},
                  {"level", "MEMORY_ONLY"}, {"min_ops", 20}};
  // Eight putters at once: the acknowledgements held for the standby are released together,
  // one standby round trip for all the reports that came meanwhile (issue 45).
  Json concurrent_puts = puts;
  concurrent_puts["putters"] = 8;
  concurrent_puts["ids"] = 8;
  concurrent_puts["rdd"] = 15;
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {!alone.ok() ? Failed(alone.status())
                   : [&] { return task(lookups, (*alone)->master_endpoint()); },
       !started.ok() ? Failed(started) : [&] { return task(lookups, pair.Masters()); },
       !alone.ok() ? Failed(alone.status())
                   : [&] { return task(puts, (*alone)->master_endpoint()); },
       !started.ok() ? Failed(started) : [&] { return task(puts, pair.Masters()); },
       !alone.ok()
           ? Failed(alone.status())
           : WithServerCpu([&] { return task(concurrent_puts, (*alone)->master_endpoint()); },
                           {{"master", {(*alone)->master_pid()}},
                            {"workers", {(*alone)->worker_pid(0), (*alone)->worker_pid(1)}}}),
       !started.ok()
           ? Failed(started)
           : WithServerCpu([&] { return task(concurrent_puts, pair.Masters()); },
                           {{"leader", {pair.master("a").pid()}},
                            {"standby", {pair.master("b").pid()}},
                            {"workers", {pair.worker("w1").pid(), pair.worker("w2").pid()}}})});
  const std::string w = "12. failover";
  runner.Add(w + ", lookups, single, 1 client: two masters under ZooKeeper", "lookups/s",
             runner.Figure(results[1], "lookups_per_s", 1, "two masters' lookups"),
             "one master alone", runner.Figure(results[0], "lookups_per_s", 1, "one master's"),
             0.95);
  runner.Add(w + ", 1 MiB put, memory, 8 putters: two masters under ZooKeeper", "GB/s",
             runner.Figure(results[5], "put_bytes_per_s", kGB, "two masters' 8 putters"),
             "one master alone",
             runner.Figure(results[4], "put_bytes_per_s", kGB, "one master's 8 putters"), 0.95,
             Better::kHigher,
             "8 clients at once, 8 ids each; the reports that arrive while the standby fetches "
             "are acknowledged together once it holds them. Server CPU per put: " +
                 CpuPerPut(results[5], {"leader", "standby", "workers"}) +
                 "; alone: " + CpuPerPut(results[4], {"master", "workers"}));
  runner.Add(w + ", 1 MiB put, memory, 1 putter: two masters under ZooKeeper", "GB/s",
             runner.Figure(results[3], "put_bytes_per_s", kGB, "two masters' puts"),
             "one master alone", runner.Figure(results[2], "put_bytes_per_s", kGB, "one master's"),
             std::nullopt, Better::kHigher,
             "informative (issue 45: report it): each put's block report is acknowledged once "
             "the in-sync standby holds it, one standby round trip per put");
  if (!started.ok()) return;

  // Failovers, one a round: kill -9 the leader, time the first lookup answered through the new
  // one, start the killed master again (it rejoins as a standby) and wait until it is in sync.
  std::vector<double> seconds;
  std::string leader = "a";
  Result<PutResult> probe =
      watcher->Put(BlockId::Rdd(14, 0), std::vector<std::byte>(1024), StorageLevel::kMemoryOnly2);
  if (!probe.ok()) {
    runner.Note("12. failover: " + probe.status().message());
    return;
  }
  for (int round = 0; round < std::max(1, runner.config().rounds); ++round) {
    const std::string standby = leader == "a" ? "b" : "a";
    const auto killed = std::chrono::steady_clock::now();
    pair.master(leader).Signal(SIGKILL);
    Client prober(pair.ClientOptionsFor());
    Result<std::vector<BlockLocations>> located = prober.Locations({BlockId::Rdd(14, 0)});
    if (!located.ok() || located->empty() || (*located)[0].locations.empty()) {
      runner.Note("12. failover: no lookup through the new leader: " + located.status().message());
      break;
    }
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
    pair.master(leader).Wait(std::chrono::seconds(5));
    pair.StartMaster(leader);
    if (!pair.WaitForLeader(*watcher, standby, std::chrono::seconds(30)) ||
        !pair.WaitForStandbyInSync(*watcher, std::chrono::seconds(30))) {
      runner.Note("12. failover: the restarted master did not rejoin in sync (see " + dir + ")");
      break;
    }
    leader = standby;
  }
  std::optional<double> median;
  std::optional<double> worst;
  if (!seconds.empty()) {
    std::sort(seconds.begin(), seconds.end());
    median = seconds[seconds.size() / 2];
    worst = seconds.back();
  }
  runner.Add(w + ", kill -9 of the leader to the first lookup through the new one (median)", "s",
             median, "target", 3.0, 1.0, Better::kLower,
             std::to_string(seconds.size()) + " failovers, --session-timeout 1.5 (ZooKeeper " +
                 "ticks of 250 ms); the worst " +
                 (worst ? FormatNumber(worst) + " s" : std::string("-")));
}

// ---- workload 13: same-host reads ----

// docs/storage.md "Same-host reads": gets from a worker on the client's host through its shared
// memory (the blocks mapped, every cache line then read), side by side with the same gets over TCP
// (local reads off), memcpy of the same bytes, Redis over loopback, and the Python client.
void SameHostReads(Runner& runner, BlockmgrCluster& cluster) {
  const BenchEnv& env = runner.config().env;
  Progress("13: same-host reads (shared memory, TCP, memcpy, Redis, Python)");
  Result<PeerServer> redis_server = StartRedis(env);
  const Json transfer{{"task", "bm_transfer"},
                      {"master", cluster.master_endpoint()},
                      {"level", "MEMORY_ONLY"},
                      {"get_api", "chunks"}};
  const Json big = With(With(With(transfer, "size", 64u << 20), "ids", 4), "rdd", 131);
  const Json medium =
      With(With(With(With(transfer, "size", 1u << 20), "ids", 64), "rdd", 132), "min_ops", 20);
  const Json small{{"task", "bm_small_gets"},
                   {"master", cluster.master_endpoint()},
                   {"size", 4096},
                   {"ids", 1000},
                   {"rdd", 133},
                   {"min_ops", 100},
                   {"local_reads", true}};
  const Json redis_task{{"task", "redis_small_gets"},
                        {"port", redis_server.ok() ? redis_server->port : 0},
                        {"size", 4096},
                        {"ids", 1000},
                        {"min_ops", 100}};
  const Json python{{"master", cluster.master_endpoint()},
                    {"size", 64u << 20},
                    {"ids", 4},
                    {"rdd", 134},
                    {"level", "MEMORY_ONLY"},
                    {"local_reads", true},
                    {"touch", true}};
  std::vector<Result<Json>> results = Interleaved(
      runner.config(),
      {[&] { return runner.Client(With(big, "local_reads", true)); },
       [&] { return runner.Client(With(With(big, "local_reads", false), "rdd", 135)); },
       [&] {
         return runner.Client({{"task", "memcpy"}, {"size", 64u << 20}});
       },
       [&] { return runner.Client(With(medium, "local_reads", true)); },
       [&] { return runner.Client(With(With(medium, "local_reads", false), "rdd", 136)); },
       [&] {
         return runner.Client({{"task", "memcpy"}, {"size", 1u << 20}});
       },
       [&] { return runner.Client(With(small, "threads", 1)); },
       [&] { return runner.Client(With(With(small, "threads", 16), "mode", "get_many")); },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] { return runner.Client(With(redis_task, "pipeline", 1)); },
       !redis_server.ok() ? Failed(redis_server.status())
                          : [&] { return runner.Client(With(redis_task, "pipeline", 16)); },
       [&] { return runner.PythonClient(python); },
       [&] {
         return runner.Client(
             With(With(With(big, "local_reads", true), "idle_mapping_bytes", 0), "rdd", 137));
       },
       [&] {
         return runner.Client(
             With(With(With(small, "threads", 1), "local_arena", false), "rdd", 138));
       },
       [&] {
         return runner.Client(
             With(With(With(With(small, "threads", 16), "mode", "get_many"), "local_arena", false),
                  "rdd", 139));
       }});
  auto figure = [&](size_t i, const std::string& key, double unit, const std::string& what) {
    return runner.Figure(results[i], key, unit, what);
  };
  const std::optional<double> big_local = figure(0, "get_bytes_per_s", kGB, "64 MiB local get");
  const std::optional<double> medium_local = figure(3, "get_bytes_per_s", kGB, "1 MiB local get");
  const std::string read = "the block mapped (Client::GetChunks), every cache line read";
  runner.Add("13a. same-host 64 MiB get, memory", "GB/s", big_local, "memcpy of the same bytes",
             figure(2, "bytes_per_s", kGB, "memcpy 64 MiB"), 0.8, Better::kHigher, read);
  runner.Add("13a. same-host 64 MiB get, memory, each mapped anew", "GB/s",
             figure(11, "get_bytes_per_s", kGB, "64 MiB local get, mapped anew"),
             "memcpy of the same bytes", figure(2, "bytes_per_s", kGB, "memcpy 64 MiB"),
             std::nullopt, Better::kHigher,
             "informative: every get maps the block anew (idle_mapping_bytes = 0), the cost of a "
             "block's first read; the row above reads the 4 blocks again through the mappings the "
             "client keeps (README \"Same-host reads\")");
  runner.Add("13a. same-host 64 MiB get, memory", "GB/s", big_local, "TCP get (local reads off)",
             figure(1, "get_bytes_per_s", kGB, "64 MiB TCP get"), std::nullopt, Better::kHigher,
             "informative: today's path, the block received into a vector, then read");
  runner.Add("13b. same-host 1 MiB get, memory", "GB/s", medium_local, "TCP get (local reads off)",
             figure(4, "get_bytes_per_s", kGB, "1 MiB TCP get"), 3.0, Better::kHigher, read);
  runner.Add("13b. same-host 1 MiB get, memory", "GB/s", medium_local, "memcpy of the same bytes",
             figure(5, "bytes_per_s", kGB, "memcpy 1 MiB"), std::nullopt);
  runner.Add("13c. same-host 4 KiB get, one at a time", "ops/s",
             figure(6, "ops_per_s", 1, "4 KiB local gets"), "redis GET",
             figure(8, "ops_per_s", 1, "redis 4 KiB GET"), 1.2, Better::kHigher,
             "blocks up to 64 KiB are copied out of the worker's small-block arena, mapped once "
             "(docs/storage.md \"Same-host reads\"); the first get of each asks the worker");
  runner.Add("13c. same-host 4 KiB get, one at a time, arena off", "ops/s",
             figure(12, "ops_per_s", 1, "4 KiB local gets, no arena"), "redis GET",
             figure(8, "ops_per_s", 1, "redis 4 KiB GET"), std::nullopt, Better::kHigher,
             "informative: every get asks the worker through the local socket, its bytes "
             "inline in the reply (ClientOptions::local_arena = false)");
  runner.Add("13d. same-host 4 KiB get, 16 in flight", "ops/s",
             figure(7, "ops_per_s", 1, "4 KiB local GetManyChunks x16"), "redis GET -P 16",
             figure(9, "ops_per_s", 1, "redis 4 KiB GET -P 16"), 1.2, Better::kHigher,
             "Client::GetManyChunks of 16 ids, copied out of the small-block arena");
  runner.Add("13d. same-host 4 KiB get, 16 in flight, arena off", "ops/s",
             figure(13, "ops_per_s", 1, "4 KiB local GetManyChunks x16, no arena"),
             "redis GET -P 16", figure(9, "ops_per_s", 1, "redis 4 KiB GET -P 16"), std::nullopt,
             Better::kHigher,
             "informative: the 16 ids asked for in one getMany request on the local socket");
  runner.Add("13e. same-host 64 MiB get from Python, memory", "GB/s",
             figure(10, "get_bytes_per_s", kGB, "Python 64 MiB local get"), "C++ same-host get",
             big_local, 0.9, Better::kHigher,
             "blockmgr.Client.get returns a read-only buffer over the mapping; NumPy reads every "
             "cache line of it in place");
}

// ---- workload 14: recompute time under cost-aware eviction ----

// docs/eviction.md "Eviction": get-or-compute over 256 partitions of 64 KiB, 10% of which take 50x
// as long to compute as the rest (1 ms, slept), read in a Zipf-like order (s = 0.9, popularity
// independent of cost), on a worker whose memory holds half of them. Two single-worker
// clusters, one evicting by cost and one by recency, run the very same access sequence, taking
// turns; the figure is the total time spent recomputing after a warm-up of the same number of
// accesses (the cold misses, equal under both, are not counted).
void Recompute(Runner& runner) {
  Progress("14: recompute time, --eviction cost against --eviction lru");
  constexpr uint32_t kPartitions = 256;
  constexpr uint64_t kSize = 64 << 10;
  // Half the working set: 128 blocks of 64 KiB.
  const std::string memory = std::to_string(kPartitions / 2 * kSize / 1024) + "KiB";
  Result<std::unique_ptr<BlockmgrCluster>> by_cost =
      BlockmgrCluster::Start(runner.config().env, {.name = "recompute-cost",
                                                   .workers = 1,
                                                   .worker_memory = memory,
                                                   .worker_args = {"--eviction", "cost"}});
  Result<std::unique_ptr<BlockmgrCluster>> by_recency =
      BlockmgrCluster::Start(runner.config().env, {.name = "recompute-lru",
                                                   .workers = 1,
                                                   .worker_memory = memory,
                                                   .worker_args = {"--eviction", "lru"}});
  const uint64_t accesses = runner.config().seconds < 1 ? 1000 : 2000;
  const Json task{{"task", "bm_recompute"},
                  {"size", kSize},
                  {"partitions", kPartitions},
                  {"cheap_seconds", 0.001},
                  {"expensive_factor", 50},
                  {"expensive_share", 0.1},
                  {"zipf", 0.9},
                  {"seed", 14},
                  {"warmup", accesses},
                  {"accesses", 2 * accesses}};
  int round = 0;
  auto run = [&](const Result<std::unique_ptr<BlockmgrCluster>>* cluster) {
    return [&runner, &task, &round, cluster]() -> Result<Json> {
      if (!cluster->ok()) return cluster->status();
      // Fresh RDD ids each run (the task removes its RDDs when done).
      return runner.Client(
          With(With(task, "master", (**cluster)->master_endpoint()), "rdd", 14000 + 100 * round++));
    };
  };
  std::vector<Result<Json>> results =
      Interleaved(runner.config(), {run(&by_cost), run(&by_recency)});
  auto figure = [&](size_t i, const std::string& key, const std::string& what) {
    return runner.Figure(results[i], key, 1, what);
  };
  const std::optional<double> cost_hits = figure(0, "hit_ratio", "cost-aware hit ratio");
  const std::optional<double> lru_hits = figure(1, "hit_ratio", "LRU hit ratio");
  auto percent = [](std::optional<double> ratio) {
    return ratio ? FormatNumber(100 * *ratio) + "%" : std::string("-");
  };
  auto count = [&](size_t i, const std::string& key) {
    return results[i].ok() ? std::to_string(results[i]->at(key).get<uint64_t>()) : "-";
  };
  runner.Add("14. recompute time, get-or-compute, skewed costs, working set 2x memory",
             "s recomputing", figure(0, "recompute_seconds", "cost-aware recompute time"), "LRU",
             figure(1, "recompute_seconds", "LRU recompute time"), 0.5, Better::kLower,
             "hit ratio: cost " + percent(cost_hits) + ", LRU " + percent(lru_hits) +
                 "; computes (of them 50x): cost " + count(0, "computes") + " (" +
                 count(0, "expensive_computes") + "), LRU " + count(1, "computes") + " (" +
                 count(1, "expensive_computes") + "); " + std::to_string(accesses) +
                 " accesses measured after as many warming up");
  runner.Add("14. recompute hit ratio (informative)", "hit ratio", cost_hits, "LRU", lru_hits);
}

// ---- workload 15: a whole shuffle ----

// README "Shuffles": every piece written by mapper processes, then every partition read by
// reducer processes (4 of each), end to end: blockmgr's push-merged partition streams (one copy
// and _2), the same shuffle as separate blocks (a put per piece, a GetMany per partition: the
// best the block API does), and Redis at its best shape (pipelined APPENDs to a key per
// partition then a GET each, or pipelined SETs then an MGET per partition). Lower is better.
void Shuffles(Runner& runner) {
  struct Shape {
    uint32_t maps;
    uint32_t partitions;
    uint64_t size;
  };
  const int processes = 4;
  uint64_t next_id = 1;
  for (const Shape& shape : {Shape{256, 256, 4096}, Shape{128, 128, 65536}}) {
    const std::string name = std::to_string(shape.maps) + " maps x " +
                             std::to_string(shape.partitions) + " partitions x " +
                             std::to_string(shape.size >> 10) + " KiB";
    Progress("15: shuffle, " + name);
    const uint64_t total = uint64_t{shape.maps} * shape.partitions * shape.size;
    const std::string memory =
        std::to_string(std::max<uint64_t>(total * 2 / (1 << 20), 256)) + "MiB";
    Result<std::unique_ptr<BlockmgrCluster>> cluster =
        BlockmgrCluster::Start(runner.config().env, {.name = "shuffle",
                                                     .workers = 3,
                                                     .worker_memory = memory,
                                                     .worker_args = {"--shuffle-memory", memory}});
    Result<PeerServer> redis_server = StartRedis(runner.config().env);
    auto bm = [&](const std::string& mode, const std::string& level) -> Result<Json> {
      if (!cluster.ok()) return cluster.status();
      return runner.Client({{"task", "bm_shuffle"},
                            {"master", (*cluster)->master_endpoint()},
                            {"shuffle_id", next_id++},
                            {"maps", shape.maps},
                            {"partitions", shape.partitions},
                            {"size", shape.size},
                            {"mode", mode},
                            {"level", level},
                            {"processes", processes},
                            {"compare_tcp", mode == "push" && level == "MEMORY_ONLY"}});
    };
    std::vector<Result<Json>> results = Interleaved(
        runner.config(),
        {[&] { return bm("push", "MEMORY_ONLY"); }, [&] { return bm("push", "MEMORY_ONLY_2"); },
         [&] { return bm("blocks", "MEMORY_ONLY"); },
         !redis_server.ok() ? Failed(redis_server.status()) : [&] {
           return runner.Client({{"task", "redis_shuffle"},
                                 {"port", redis_server->port},
                                 {"maps", shape.maps},
                                 {"partitions", shape.partitions},
                                 {"size", shape.size},
                                 {"processes", processes}});
         }});
    auto ms = [&](size_t i, const char* key, const std::string& what) {
      return runner.Figure(results[i], key, 1e-3, what);
    };
    const std::optional<double> push = ms(0, "end_to_end_seconds", "push-merged shuffle");
    const std::optional<double> push2 = ms(1, "end_to_end_seconds", "push-merged _2 shuffle");
    const std::optional<double> blocks = ms(2, "end_to_end_seconds", "shuffle as blocks");
    const std::optional<double> redis = ms(3, "end_to_end_seconds", "redis shuffle");
    std::string redis_note = "4 mapper and 4 reducer processes";
    if (results[3].ok()) redis_note += "; redis: " + (*results[3])["best_shape"].get<std::string>();
    const std::string w = "15. shuffle " + name;
    runner.Add(w + ", push-merged, end to end", "ms", push, "redis, best shape", redis, 0.5,
               Better::kLower, redis_note);
    runner.Add(w + ", separate blocks / push-merged", "ms", blocks, "push-merged", push, 3.0,
               Better::kHigher, "a put per piece, a GetMany per partition, against push-merged");
    runner.Add(
        w + ", push-merged _2 / one copy", "ms", push2, "push-merged", push, 1.5, Better::kLower,
        "each piece pushed to its primary, acknowledged once the replica it forwards to holds it");
    runner.Add(w + ", push-merged, reads alone", "ms", ms(0, "read_seconds", "push-merged reads"),
               "redis, best shape", ms(3, "read_seconds", "redis reads"), std::nullopt,
               Better::kLower, "informative");
    runner.Add(w + ", push-merged reads, same host: local socket / TCP", "ms",
               ms(0, "read_seconds", "push-merged reads"), "over TCP",
               ms(0, "tcp_read_seconds", "push-merged reads over TCP"), std::nullopt,
               Better::kLower,
               "informative: the same partitions read by the same reducers, through the "
               "workers' local-read sockets, then over TCP");
    runner.Add(w + ", separate blocks, reads alone", "ms", ms(2, "read_seconds", "block reads"),
               "push-merged", ms(0, "read_seconds", "push-merged reads"), std::nullopt,
               Better::kLower, "informative");
  }
}

Report RunBenchmark(const BenchConfig& config) {
  Report report;
  Runner runner(config, report);
  auto selected = [&](int workload) { return config.only.empty() || config.only.count(workload); };
  std::filesystem::create_directories(config.env.work_dir);

  std::optional<double> memcpy;
  if (selected(0) || selected(1)) memcpy = MeasureMemcpy(runner);
  if (selected(0)) runner.Add("0. machine", "memcpy GB/s", memcpy, "none", std::nullopt);

  if (selected(1) || selected(2) || selected(3) || selected(4) || selected(7) || selected(8) ||
      selected(9) || selected(13)) {
    Result<std::unique_ptr<BlockmgrCluster>> cluster =
        BlockmgrCluster::Start(config.env, {.name = "main", .workers = 1, .worker_memory = "1GiB"});
    if (!cluster.ok()) {
      runner.Note("blockmgr cluster: " + cluster.status().message());
    } else {
      if (selected(1)) LargeBlocks(runner, **cluster, memcpy);
      if (selected(2)) MediumBlocks(runner, **cluster);
      if (selected(2)) GetsWhileScraped(runner);
      if (selected(3)) SmallGets(runner, **cluster);
      if (selected(4)) DiskBlocks(runner, **cluster);
      if (selected(7)) ShuffleFetch(runner, **cluster);
      if (selected(8)) PythonClient(runner, **cluster);
      if (selected(9)) CurveBlocks(runner, **cluster);
      if (selected(13)) SameHostReads(runner, **cluster);
    }
  }
  if (selected(5)) MasterLoad(runner);
  if (selected(10)) GetsDuringSpills(runner);
  if (selected(11)) DigestCost(runner);
  if (selected(12)) Failover(runner);
  if (selected(14)) Recompute(runner);
  if (selected(15)) Shuffles(runner);
  if (selected(6)) {
    if (config.big_block_bytes > 0) {
      BigBlock(runner);
    } else {
      runner.Note("6. big DISK_ONLY block skipped (--big-block 0)");
    }
  }
  // The disk directories can be large; the logs stay for reading.
  for (const auto& entry : std::filesystem::directory_iterator(config.env.work_dir)) {
    if (entry.path().filename().string().find("-disk-") != std::string::npos) {
      std::filesystem::remove_all(entry.path());
    }
  }
  return report;
}

}  // namespace bm::bench
