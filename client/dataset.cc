#include "client/dataset.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <zmq.hpp>

#include "common/block_id.h"

namespace bm {

// ---- CacheSession ----

CacheSession::CacheSession(ClientOptions options)
    : options_(std::move(options)), context_(std::make_unique<zmq::context_t>()) {}

CacheSession::~CacheSession() {
  // The clients' sockets must close before their context does.
  idle_.clear();
}

CacheCounters CacheSession::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

CacheSession::ClientLoan::ClientLoan(CacheSession& session) : session(session) {
  {
    std::lock_guard lock(session.mutex_);
    if (!session.idle_.empty()) {
      client = std::move(session.idle_.back());
      session.idle_.pop_back();
      return;
    }
  }
  client = std::make_unique<Client>(session.options_, *session.context_);
}

CacheSession::ClientLoan::~ClientLoan() {
  std::lock_guard lock(session.mutex_);
  session.counters_ += client->TakeCounters();
  session.idle_.push_back(std::move(client));
}

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
