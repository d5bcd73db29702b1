#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/protocol.h"
#include "master/block_index.h"
#include "master/lost_blocks.h"
#include "master/master_status.h"
#include "master/worker_links.h"
#include "master/worker_registry.h"

namespace bm {

// The wire form of a lost block's record.
void FillLostRecord(const LostRecord& record, proto::LostBlockRecord::Builder out);

// Answers the master's read-only requests (getLocations, listWorkers, listBlocks, listRdds,
// listRddPage) into the reply being built, from the state of the master's loop, which it
// borrows: the block index, the worker registry, the workers' keys (from their links), the
// RDD descriptions and the records of lost blocks. All of them must outlive it.
//
// Not thread-safe: owned by the master's loop and used on its thread only.
class ClientQueries {
 public:
  ClientQueries(const Clock& clock, bool keys_enabled, const BlockIndex& index,
                const WorkerRegistry& registry, const WorkerLinks& links,
                const std::map<uint64_t, RddDescription>& rdd_descriptions, const LostBlocks& lost)
      : clock_(clock),
        keys_enabled_(keys_enabled),
        index_(index),
        registry_(registry),
        links_(links),
        rdd_descriptions_(rdd_descriptions),
        lost_(lost) {}

  // Which datasets (common/security/tenant.h) a list shows to the asker; null: all of them.
  using Visible = std::function<bool(const std::string& dataset)>;

  Status GetLocations(proto::GetLocations::Reader request, proto::Reply::Builder reply);
  void ListWorkers(proto::Reply::Builder reply) const;
  Status ListBlocks(proto::ListBlocks::Reader request, proto::Reply::Builder reply,
                    const Visible& visible = nullptr) const;
  void ListRdds(proto::Reply::Builder reply, const Visible& visible = nullptr) const;
  void ListRddPage(proto::ListRdds::Reader request, proto::Reply::Builder reply,
                   const Visible& visible = nullptr) const;

  // Where the block is (no locations when `info` is empty), with each worker's address and key.
  void FillBlockLocations(const BlockId& id, const std::optional<BlockInfo>& info,
                          proto::BlockLocations::Builder out) const;

 private:
  // RDDs with cached blocks, and registered ones with none cached (yet, or any more), by id.
  std::map<uint64_t, RddSummary> CollectRdds(const Visible& visible) const;
  void FillRddInfo(uint64_t rdd_id, const RddSummary& summary, proto::RddInfo::Builder out) const;

  const Clock& clock_;
  const bool keys_enabled_;
  const BlockIndex& index_;
  const WorkerRegistry& registry_;
  const WorkerLinks& links_;
  const std::map<uint64_t, RddDescription>& rdd_descriptions_;
  const LostBlocks& lost_;
  // Reused by GetLocations so that a lookup allocates nothing per block.
  std::vector<LocationRef> lookup_scratch_;
};

}  // namespace bm
