#include "blockmgr/dataset.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <zmq.hpp>

#include "blockmgr/block_id.h"
#include "client/placement.h"
#include "common/core/mutex.h"

namespace bm {

// ---- CacheSession ----

// Thread-safe: any thread borrows and returns clients.
class CacheSession::ClientPool {
 public:
  explicit ClientPool(ClientOptions options) : options_(std::move(options)) {}
  ~ClientPool() {
    // The clients' sockets must close before their context does.
    idle_.clear();
  }

  std::unique_ptr<Client> Borrow() {
    {
      MutexLock lock(mutex_);
      if (!idle_.empty()) {
        std::unique_ptr<Client> client = std::move(idle_.back());
        idle_.pop_back();
        return client;
      }
    }
    return std::make_unique<Client>(options_, context_);
  }

  void Return(std::unique_ptr<Client> client) {
    MutexLock lock(mutex_);
    counters_ += client->TakeCounters();
    idle_.push_back(std::move(client));
  }

  CacheCounters counters() {
    MutexLock lock(mutex_);
    return counters_;
  }

 private:
  const ClientOptions options_;
  zmq::context_t context_;  // shared by all clients; outlives them
  Mutex mutex_;
  std::vector<std::unique_ptr<Client>> idle_ BM_GUARDED_BY(mutex_);
  CacheCounters counters_ BM_GUARDED_BY(mutex_);
};

CacheSession::CacheSession(ClientOptions options)
    : pool_(std::make_unique<ClientPool>(std::move(options))) {}

CacheSession::~CacheSession() = default;

CacheCounters CacheSession::counters() const { return pool_->counters(); }

CacheSession::ClientLoan::ClientLoan(CacheSession& session)
    : session(session), client(session.pool_->Borrow()) {}

CacheSession::ClientLoan::~ClientLoan() { session.pool_->Return(std::move(client)); }

// ---- Dataset ----

Dataset::Dataset(std::shared_ptr<CacheSession> session, uint64_t rdd_id, std::string name,
                 uint32_t num_partitions, SourceFn source, std::shared_ptr<Dataset> parent,
                 MapFn map)
    : session_(std::move(session)),
      rdd_id_(rdd_id),
      name_(std::move(name)),
      num_partitions_(num_partitions),
      source_(std::move(source)),
      parent_(std::move(parent)),
      map_(std::move(map)) {}

std::shared_ptr<Dataset> Dataset::Source(std::shared_ptr<CacheSession> session, uint64_t rdd_id,
                                         std::string name, uint32_t num_partitions,
                                         SourceFn compute) {
  BM_CHECK(session != nullptr && compute != nullptr);
  return std::shared_ptr<Dataset>(new Dataset(std::move(session), rdd_id, std::move(name),
                                              num_partitions, std::move(compute), nullptr, {}));
}

std::shared_ptr<Dataset> Dataset::Map(uint64_t rdd_id, std::string name, MapFn fn) {
  BM_CHECK(fn != nullptr);
  return std::shared_ptr<Dataset>(new Dataset(session_, rdd_id, std::move(name), num_partitions_,
                                              {}, shared_from_this(), std::move(fn)));
}

Status Dataset::Persist(StorageLevel level) {
  BM_RETURN_IF_ERROR(session_->WithClient(
      [&](Client& client) { return client.RegisterRdd(rdd_id_, name_, level, num_partitions_); }));
  level_ = level;
  return Status::Ok();
}

Result<uint64_t> Dataset::Unpersist() {
  level_.reset();
  return session_->WithClient([&](Client& client) { return client.RemoveRdd(rdd_id_); });
}

Result<PartitionData> Dataset::Partition(uint32_t i) {
  if (i >= num_partitions_) {
    return InvalidArgumentError("partition " + std::to_string(i) + " of " + name_ + " (RDD " +
                                std::to_string(rdd_id_) + ") does not exist: it has " +
                                std::to_string(num_partitions_));
  }
  if (!level_) return Compute(i);
  const StorageLevel level = *level_;
  return session_->WithClient([&](Client& client) {
    return client.GetOrCompute(BlockId::Rdd(rdd_id_, i), level, [&] { return Compute(i); });
  });
}

Result<PartitionData> Dataset::Compute(uint32_t i) {
  if (source_) return source_(i);
  BM_ASSIGN_OR_RETURN(PartitionData parent, parent_->Partition(i));
  return map_(i, parent);
}

Status Dataset::ForEachPartition(const PartitionFn& fn, size_t parallelism) {
  return ForEachIndex(
      [&](uint32_t i) -> Status {
        BM_ASSIGN_OR_RETURN(PartitionData data, Partition(i));
        return fn(i, data);
      },
      parallelism);
}

Result<std::vector<PartitionData>> Dataset::Collect(size_t parallelism) {
  std::vector<PartitionData> partitions(num_partitions_);
  BM_RETURN_IF_ERROR(ForEachIndex(
      [&](uint32_t i) -> Status {
        BM_ASSIGN_OR_RETURN(partitions[i], Partition(i));
        return Status::Ok();
      },
      parallelism));
  return partitions;
}

Result<std::vector<std::string>> Dataset::PreferredHosts(size_t partition) {
  if (partition >= num_partitions_) {
    return InvalidArgumentError("partition " + std::to_string(partition) + " of " + name_ +
                                " (RDD " + std::to_string(rdd_id_) + ") does not exist: it has " +
                                std::to_string(num_partitions_));
  }
  BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> blocks, session_->WithClient([&](Client& client) {
    return client.Locations({BlockId::Rdd(rdd_id_, partition)});
  }));
  if (blocks.empty()) return std::vector<std::string>{};
  return PreferredHostsOf(blocks.front().locations);
}

Result<std::vector<std::vector<std::string>>> Dataset::PreferredHostsOfAll() {
  std::vector<BlockId> ids;
  ids.reserve(num_partitions_);
  for (uint32_t i = 0; i < num_partitions_; ++i) ids.push_back(BlockId::Rdd(rdd_id_, i));
  BM_ASSIGN_OR_RETURN(std::vector<BlockLocations> blocks,
                      session_->WithClient([&](Client& client) { return client.Locations(ids); }));
  if (blocks.size() != ids.size()) {
    return InternalError("the master answered for " + std::to_string(blocks.size()) + " of " +
                         std::to_string(ids.size()) + " blocks");
  }
  std::vector<std::vector<std::string>> hosts;
  hosts.reserve(blocks.size());
  for (const BlockLocations& block : blocks) hosts.push_back(PreferredHostsOf(block.locations));
  return hosts;
}

Status Dataset::ForEachIndex(const std::function<Status(uint32_t)>& task, size_t parallelism) {
  if (parallelism == 0) parallelism = std::max(1u, std::thread::hardware_concurrency());
  parallelism = std::max<size_t>(1, std::min<size_t>(parallelism, num_partitions_));
  std::atomic<uint32_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status first_error;
  auto work = [&] {
    while (!failed.load()) {
      const uint32_t i = next.fetch_add(1);
      if (i >= num_partitions_) return;
      Status status = task(i);
      if (!status.ok()) {
        std::lock_guard lock(error_mutex);
        if (!failed.exchange(true)) first_error = std::move(status);
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < parallelism; ++t) threads.emplace_back(work);
  work();
  for (std::thread& thread : threads) thread.join();
  return first_error;
}

}  // namespace bm
