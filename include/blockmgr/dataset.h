#pragma once

// Partitioned datasets whose partitions are cached in blockmgr, in the spirit of Spark's RDDs:
// a dataset has an id, a partition count and a way to compute each partition, either from
// scratch (a source) or from the same partition of a parent (a map). A persisted dataset's
// partitions are read from the cache when a worker holds them and computed (then cached) when
// not, so a lost partition is recomputed from its lineage, never an error.
//
//   auto session = std::make_shared<CacheSession>(ClientOptions{.master_address = ...});
//   auto lines = Dataset::Source(session, 1, "lines", 16, ReadShard);
//   auto counts = lines->Map(2, "counts", CountWords);
//   BM_RETURN_IF_ERROR(counts->Persist(StorageLevel::kMemoryAndDisk));
//   BM_ASSIGN_OR_RETURN(auto partitions, counts->Collect());

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "blockmgr/types.h"

namespace bm {

// A process's connection to the cache, shared by its datasets and the threads that compute
// them (what a SparkContext is to RDDs). Thread-safe: each thread borrows a Client of its own
// from a pool, so partitions can be fetched and computed in parallel.
class CacheSession {
 public:
  explicit CacheSession(ClientOptions options);
  ~CacheSession();
  CacheSession(const CacheSession&) = delete;
  CacheSession& operator=(const CacheSession&) = delete;

  // Runs `use` with a Client no other thread is using, and returns what it returns. Calls may
  // nest (a partition computed from its parent's borrows a second client).
  template <typename Use>
  auto WithClient(Use&& use) -> decltype(use(std::declval<Client&>())) {
    ClientLoan loan(*this);
    return use(*loan.client);
  }

  // The get-or-compute counters of every client of this session, summed over the calls that
  // have returned.
  CacheCounters counters() const;

 private:
  struct ClientLoan {
    explicit ClientLoan(CacheSession& session);
    ~ClientLoan();
    CacheSession& session;
    std::unique_ptr<Client> client;
  };

  // The idle clients and the counters of the calls that returned, under a mutex (dataset.cc).
  class ClientPool;

  const std::unique_ptr<ClientPool> pool_;
};

using PartitionData = std::vector<std::byte>;

// A partitioned dataset. Create sources with Dataset::Source and derive others with Map.
// Partition(), Collect() and ForEachPartition() may run on several threads at once; Persist()
// and Unpersist() change how later calls read partitions and must not race with them.
class Dataset : public std::enable_shared_from_this<Dataset> {
 public:
  // Computes partition `partition` of a source from scratch.
  using SourceFn = std::function<Result<PartitionData>(uint32_t partition)>;
  // Computes partition `partition` of a derived dataset from its parent's same partition.
  using MapFn =
      std::function<Result<PartitionData>(uint32_t partition, std::span<const std::byte> parent)>;
  // Consumes one partition (ForEachPartition).
  using PartitionFn = std::function<Status(uint32_t partition, std::span<const std::byte> data)>;

  // `rdd_id` names the dataset's blocks (rdd_<rdd_id>_<partition>): keep it stable across runs
  // so a later run finds what an earlier one cached.
  static std::shared_ptr<Dataset> Source(std::shared_ptr<CacheSession> session, uint64_t rdd_id,
                                         std::string name, uint32_t num_partitions,
                                         SourceFn compute);
  // A dataset whose partition i is `fn(i, parent partition i)`.
  std::shared_ptr<Dataset> Map(uint64_t rdd_id, std::string name, MapFn fn);

  uint64_t id() const { return rdd_id_; }
  const std::string& name() const { return name_; }
  uint32_t num_partitions() const { return num_partitions_; }
  // The level partitions are cached at; nullopt when not persisted.
  std::optional<StorageLevel> level() const { return level_; }

  // Caches partitions at `level` from now on, and describes the dataset to the master (name,
  // level, partition count) for `bmctl rdds`. Like Spark's persist, nothing is computed yet.
  // kInvalidArgument when the RDD id is already persisted with another name, level or
  // partition count (its cached blocks belong to that other dataset): unpersist it first.
  Status Persist(StorageLevel level);
  // Stops caching, and removes every cached partition of the dataset on every worker. Returns
  // how many blocks were removed.
  Result<uint64_t> Unpersist();

  // Partition `i`: from the cache when persisted and a worker holds it; otherwise computed
  // (from the parent's partition, itself cached or computed) and, when persisted, cached.
  Result<PartitionData> Partition(uint32_t i);
  // Every partition, in order, fetched or computed by `parallelism` threads (0: one per core).
  Result<std::vector<PartitionData>> Collect(size_t parallelism = 0);
  // Calls `fn` for every partition, from `parallelism` threads (0: one per core), in no
  // particular order. Stops at the first error (of a partition or of `fn`) and returns it.
  Status ForEachPartition(const PartitionFn& fn, size_t parallelism = 0);

  // Where partition `partition` is cached, so a scheduler can run its task there (Spark's
  // getPreferredLocations): the host part of the address of each worker holding its block
  // (e.g. "10.0.0.5"), memory copies first, each host once (PreferredHostsOf in
  // client/placement.h). Empty when no worker holds it, whether or not the dataset is
  // persisted (another run may have cached it). Asks the master.
  Result<std::vector<std::string>> PreferredHosts(size_t partition);
  // PreferredHosts of every partition, in partition order, from one master call (one per
  // 10,000 partitions).
  Result<std::vector<std::vector<std::string>>> PreferredHostsOfAll();

 private:
  Dataset(std::shared_ptr<CacheSession> session, uint64_t rdd_id, std::string name,
          uint32_t num_partitions, SourceFn source, std::shared_ptr<Dataset> parent, MapFn map);

  // Computes partition `i` without looking in the cache for it (its parent may be cached).
  Result<PartitionData> Compute(uint32_t i);
  // Runs task(i) for every partition index on `parallelism` threads; the first error stops
  // the others from starting new indexes and is returned.
  Status ForEachIndex(const std::function<Status(uint32_t)>& task, size_t parallelism);

  const std::shared_ptr<CacheSession> session_;
  const uint64_t rdd_id_;
  const std::string name_;
  const uint32_t num_partitions_;
  const SourceFn source_;                  // set for sources
  const std::shared_ptr<Dataset> parent_;  // set for derived datasets
  const MapFn map_;                        // set for derived datasets
  std::optional<StorageLevel> level_;
};

}  // namespace bm
