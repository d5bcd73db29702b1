// Load on bm-master through the real protocol: a fake worker registers and reports blocks the
// way worker/master_link.cc does, and a client looks them up.

#include <chrono>
#include <random>
#include <thread>

#include "bench/proc_info.h"
#include "bench/tasks.h"
#include "blockmgr/client.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/process.h"

namespace bm::bench {
namespace {

constexpr char kFakeWorkerId[] = "bench-fake-worker";
// A thousand partitions per RDD, as a large cached dataset would have.
constexpr uint64_t kPartitionsPerRdd = 1000;
constexpr uint64_t kReportedBlockSize = 1 << 20;
// About the size of a one-id getLocations reply (its Cap'n Proto message): the raw peer's.
constexpr uint64_t kLookupReplyBytes = 120;

BlockId NthBlock(uint64_t n) { return BlockId::Rdd(n / kPartitionsPerRdd, n % kPartitionsPerRdd); }

// The fake worker's channel to the master: register once, then report blocks in batches.
class FakeWorker {
 public:
  FakeWorker(zmq::context_t& context, const std::string& master)
      : channel_(context, master, std::chrono::seconds(60)) {}

  Status Register(const std::string& address) {
    capnp::MallocMessageBuilder message;
    proto::RegisterWorker::Builder reg = message.initRoot<proto::Request>().initRegisterWorker();
    reg.setWorkerId(kFakeWorkerId);
    reg.setAddress(address);
    ToProto(WorkerStats{}, reg.initStats());
    reg.initBlocks(0);
    return channel_.Call(message).status();
  }

  // Reports blocks [first, first + count) as stored in memory, in one reportBlocks.
  Status Report(uint64_t first, uint64_t count) {
    capnp::MallocMessageBuilder message;
    proto::ReportBlocks::Builder report = message.initRoot<proto::Request>().initReportBlocks();
    report.setWorkerId(kFakeWorkerId);
    auto updates = report.initUpdates(static_cast<unsigned>(count));
    for (uint64_t i = 0; i < count; ++i) {
      proto::BlockStatus::Builder status = updates[i].initStatus();
      status.setBlockId(NthBlock(first + i).ToString());
      status.setTier(proto::Tier::MEMORY);
      status.setSize(kReportedBlockSize);
      status.setLevel(proto::StorageLevel::MEMORY_ONLY);
      updates[i].setRemoved(false);
    }
    ToProto(WorkerStats{}, report.initStats());
    return channel_.Call(message).status();
  }

 private:
  RpcChannel channel_;
};

// Location lookups of random registered blocks, `batch` ids per request; lookups per second.
Result<double> MeasureLookups(Client& client, uint64_t registered, size_t batch,
                              const Duration& duration, uint64_t seed = 42) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<uint64_t> pick(0, registered - 1);
  std::vector<BlockId> ids(batch, NthBlock(0));
  BM_ASSIGN_OR_RETURN(Timed timed, RunTimed(duration, [&]() -> Status {
                        for (BlockId& id : ids) id = NthBlock(pick(random));
                        BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> found,
                                            client.Locations(ids));
                        for (const BlockLocations& block : found) {
                          if (block.locations.empty())
                            return InternalError("a block was not found");
                        }
                        return Status::Ok();
                      }));
  return timed.per_second() * static_cast<double>(batch);
}

using WallClock = std::chrono::system_clock;

int64_t WallMillis(WallClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// One of several concurrent lookup clients (`"mode": "lookups"`, run in a process of its own
// by ConcurrentClients): connects, waits for the common start time so that all clients'
// measurements overlap, then looks up random blocks one request at a time.
Result<Json> LookupClientTask(const Json& task) {
  zmq::context_t context;
  ClientOptions options;
  options.master_address = task.at("master").get<std::string>();
  options.request_timeout = std::chrono::seconds(60);
  Client client(options, context);
  BM_RETURN_IF_ERROR(client.PingMaster());
  const int64_t late_ms = WaitForCommonStart(task.at("start_at_ms").get<int64_t>());
  const double cpu_before = ProcessCpuSeconds(getpid());
  const auto wall_before = std::chrono::steady_clock::now();
  BM_ASSIGN_OR_RETURN(const double rate,
                      MeasureLookups(client, task.at("registered").get<uint64_t>(),
                                     task.at("ids_per_request").get<size_t>(), DurationOf(task),
                                     task.at("seed").get<uint64_t>()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  const double cpu_us_per_op =
      (ProcessCpuSeconds(getpid()) - cpu_before) * 1e6 / std::max(1.0, rate * seconds);
  return Json{{"ops_per_s", rate}, {"late_ms", late_ms}, {"cpu_us_per_op", cpu_us_per_op}};
}

// A server's capacity for one-at-a-time requests: `clients` processes (as the bench's other
// clients are) each running `child` (a client task taking "seed" and "start_at_ms", answering
// {"ops_per_s", "late_ms", "cpu_us_per_op"}), measured over the same window. Returns the sum of
// their rates, how late the last one started (> 0 means its window did not fully overlap the
// others'), and the CPU per request of the server (`server_pid`) and of each client.
Result<Json> ConcurrentClients(const Json& task, Json child, pid_t server_pid, int clients) {
  // Process start-up on a loaded 2-core machine takes a while; all start together after it.
  const int64_t start_at_ms = WallMillis(WallClock::now()) + 1000 + 100 * clients;
  const std::string binary = OwnBinaryDir() + "/bm-bench";
  const std::string log = task.value("log", std::string("/dev/null"));
  std::vector<Result<testing::CommandResult>> runs(clients, InternalError("not run"));
  std::vector<std::thread> threads;
  child["start_at_ms"] = start_at_ms;
  child["seconds"] = task.value("seconds", 1.0);
  child["min_ops"] = task.value("min_ops", uint64_t{3});
  for (int i = 0; i < clients; ++i) {
    child["seed"] = 1000 + i;
    threads.emplace_back([&runs, i, binary, log, child] {
      runs[i] = testing::RunCommand(testing::Command{.binary = binary,
                                                     .args = {"--client", child.dump()},
                                                     .stderr_log = log,
                                                     .timeout = std::chrono::minutes(5)});
    });
  }
  // The server's CPU from the clients' common start to the last one's end (their measuring
  // windows, give or take the clients' own exit).
  std::this_thread::sleep_until(WallClock::time_point{std::chrono::milliseconds(start_at_ms)});
  const double server_cpu_before = ProcessCpuSeconds(server_pid);
  const auto window_start = std::chrono::steady_clock::now();
  for (std::thread& thread : threads) thread.join();
  const double window =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
  const double server_cpu = ProcessCpuSeconds(server_pid) - server_cpu_before;
  double total = 0;
  double client_cpu_us = 0;
  int64_t late_ms = 0;
  for (int i = 0; i < clients; ++i) {
    if (!runs[i].ok()) return runs[i].status();
    Json result = Json::parse(runs[i]->out, nullptr, /*allow_exceptions=*/false);
    if (runs[i]->exit_code != 0 || result.is_discarded() || !result.value("ok", false)) {
      return InternalError("client " + std::to_string(i) + " (" + child.value("task", "") +
                           ") failed (exit " + std::to_string(runs[i]->exit_code) +
                           "): " + (result.is_object() ? result.value("error", "") : "") +
                           " (see " + log + ")");
    }
    total += result.at("ops_per_s").get<double>();
    client_cpu_us += result.at("cpu_us_per_op").get<double>() / clients;
    late_ms = std::max(late_ms, result.at("late_ms").get<int64_t>());
  }
  // Server CPU per request: an upper bound (the window is a little longer than the requests').
  return Json{{"ops_per_s", total},
              {"late_ms", late_ms},
              {"server_cpu_us_per_op", server_cpu * 1e6 / std::max(1.0, total * window)},
              {"client_cpu_us_per_op", client_cpu_us}};
}

}  // namespace

Result<Json> MasterLoadTask(const Json& task) {
  if (task.value("mode", "") == "lookups") return LookupClientTask(task);
  const std::string master = task.at("master").get<std::string>();
  const pid_t master_pid = task.at("master_pid").get<pid_t>();
  const std::vector<uint64_t> counts = task.at("counts").get<std::vector<uint64_t>>();
  const uint64_t batch = task.value("batch", uint64_t{4096});
  const std::vector<int> concurrent = task.value("concurrent_clients", std::vector<int>{});
  const Duration duration = DurationOf(task);
  auto rss = [&]() -> Result<uint64_t> {
    std::optional<uint64_t> bytes = ProcStatusBytes(master_pid, "VmRSS");
    if (!bytes) return InternalError("cannot read the master's RSS");
    return *bytes;
  };

  zmq::context_t context;
  FakeWorker worker(context, master);
  // Nothing listens there: the master's removal link to the fake worker stays idle.
  BM_RETURN_IF_ERROR(
      worker.Register("tcp://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort())));
  ClientOptions options;
  options.master_address = master;
  options.request_timeout = std::chrono::seconds(60);
  Client client(options, context);
  BM_RETURN_IF_ERROR(client.PingMaster());
  BM_ASSIGN_OR_RETURN(const uint64_t idle_rss, rss());

  Json out{{"idle_rss", idle_rss}, {"batch", batch}, {"at", Json::object()}};
  uint64_t registered = 0;
  // Reports of one update each, the shape of a worker's traffic after single puts.
  BM_ASSIGN_OR_RETURN(Timed singles,
                      RunTimed(duration, [&] { return worker.Report(registered++, 1); }));
  out["single_reports_per_s"] = singles.per_second();

  for (uint64_t target : counts) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const uint64_t before = registered;
    while (registered < target) {
      const uint64_t n = std::min(batch, target - registered);
      BM_RETURN_IF_ERROR(worker.Report(registered, n));
      registered += n;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    BM_ASSIGN_OR_RETURN(const uint64_t loaded_rss, rss());
    Json at{{"blocks", registered},
            {"rss", loaded_rss},
            {"bytes_per_block", static_cast<double>(loaded_rss - std::min(loaded_rss, idle_rss)) /
                                    static_cast<double>(registered)},
            {"batched_updates_per_s", static_cast<double>(registered - before) / seconds}};
    BM_ASSIGN_OR_RETURN(at["lookups_single_per_s"],
                        MeasureLookups(client, registered, 1, duration));
    for (int clients : concurrent) {
      const Json lookup_client{{"task", "master_load"},
                               {"mode", "lookups"},
                               {"master", master},
                               {"registered", registered},
                               {"ids_per_request", 1}};
      BM_ASSIGN_OR_RETURN(Json many, ConcurrentClients(task, lookup_client, master_pid, clients));
      const std::string key = "lookups_single_" + std::to_string(clients) + "_clients";
      at[key + "_per_s"] = many["ops_per_s"];
      at[key + "_late_ms"] = many["late_ms"];
      at[key + "_master_cpu_us"] = many["server_cpu_us_per_op"];
      at[key + "_client_cpu_us"] = many["client_cpu_us_per_op"];
      // The transport's floor, right after: the same clients' round trips of a lookup's size
      // to a bare ZeroMQ ROUTER that answers each at once (bench/raw_zmq.h).
      if (task.contains("raw_endpoint")) {
        const Json raw_client{{"task", "zmq_round_trips"},
                              {"endpoint", task.at("raw_endpoint")},
                              {"size", kLookupReplyBytes}};
        BM_ASSIGN_OR_RETURN(Json raw, ConcurrentClients(task, raw_client,
                                                        task.at("raw_pid").get<pid_t>(), clients));
        at[key + "_raw_per_s"] = raw["ops_per_s"];
        at[key + "_raw_server_cpu_us"] = raw["server_cpu_us_per_op"];
        at[key + "_raw_client_cpu_us"] = raw["client_cpu_us_per_op"];
        at[key + "_raw_reply_bytes"] = kLookupReplyBytes;
      }
    }
    BM_ASSIGN_OR_RETURN(at["lookups_batched_per_s"],
                        MeasureLookups(client, registered, 100, duration));
    out["at"][std::to_string(target)] = at;
  }
  return out;
}

}  // namespace bm::bench
