// Load on bm-master through the real protocol: a fake worker registers and reports blocks the
// way worker/master_link.cc does, and a client looks them up.

#include <random>

#include "bench/child_process.h"
#include "bench/tasks.h"
#include "client/client.h"
#include "common/protocol.h"
#include "common/transport.h"

namespace bm::bench {
namespace {

constexpr char kFakeWorkerId[] = "bench-fake-worker";
// A thousand partitions per RDD, as a large cached dataset would have.
constexpr uint64_t kPartitionsPerRdd = 1000;
constexpr uint64_t kReportedBlockSize = 1 << 20;

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
                              const Duration& duration) {
  std::mt19937_64 random(42);
  std::uniform_int_distribution<uint64_t> pick(0, registered - 1);
  std::vector<BlockId> ids(batch, NthBlock(0));
  ASSIGN_OR_RETURN(Timed timed, RunTimed(duration, [&]() -> Status {
                     for (BlockId& id : ids) id = NthBlock(pick(random));
                     ASSIGN_OR_RETURN(std::vector<BlockLocations> found, client.Locations(ids));
                     for (const BlockLocations& block : found) {
                       if (block.locations.empty()) return InternalError("a block was not found");
                     }
                     return Status::Ok();
                   }));
  return timed.per_second() * static_cast<double>(batch);
}

}  // namespace

Result<Json> MasterLoadTask(const Json& task) {
  const std::string master = task.at("master").get<std::string>();
  const pid_t master_pid = task.at("master_pid").get<pid_t>();
  const std::vector<uint64_t> counts = task.at("counts").get<std::vector<uint64_t>>();
  const uint64_t batch = task.value("batch", uint64_t{4096});
  const Duration duration = DurationOf(task);
  auto rss = [&]() -> Result<uint64_t> {
    std::optional<uint64_t> bytes = ProcStatusBytes(master_pid, "VmRSS");
    if (!bytes) return InternalError("cannot read the master's RSS");
    return *bytes;
  };

  zmq::context_t context;
  FakeWorker worker(context, master);
  // Nothing listens there: the master's removal link to the fake worker stays idle.
  RETURN_IF_ERROR(worker.Register("tcp://127.0.0.1:" + std::to_string(FreeLoopbackPort())));
  ClientOptions options;
  options.master_address = master;
  options.request_timeout = std::chrono::seconds(60);
  Client client(options, context);
  RETURN_IF_ERROR(client.PingMaster());
  ASSIGN_OR_RETURN(const uint64_t idle_rss, rss());

  Json out{{"idle_rss", idle_rss}, {"batch", batch}, {"at", Json::object()}};
  uint64_t registered = 0;
  // Reports of one update each, the shape of a worker's traffic after single puts.
  ASSIGN_OR_RETURN(Timed singles, RunTimed(duration, [&] { return worker.Report(registered++, 1); }));
  out["single_reports_per_s"] = singles.per_second();

  for (uint64_t target : counts) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const uint64_t before = registered;
    while (registered < target) {
      const uint64_t n = std::min(batch, target - registered);
      RETURN_IF_ERROR(worker.Report(registered, n));
      registered += n;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ASSIGN_OR_RETURN(const uint64_t loaded_rss, rss());
    Json at{{"blocks", registered},
            {"rss", loaded_rss},
            {"bytes_per_block", static_cast<double>(loaded_rss - std::min(loaded_rss, idle_rss)) /
                                    static_cast<double>(registered)},
            {"batched_updates_per_s", static_cast<double>(registered - before) / seconds}};
    ASSIGN_OR_RETURN(at["lookups_single_per_s"], MeasureLookups(client, registered, 1, duration));
    ASSIGN_OR_RETURN(at["lookups_batched_per_s"],
                     MeasureLookups(client, registered, 100, duration));
    out["at"][std::to_string(target)] = at;
  }
  return out;
}

}  // namespace bm::bench
