// Client's public calls, each handed to its Impl (client/client_impl.h), so the public header
// carries no internal types.

#include <zmq.hpp>

#include "client/client_impl.h"

namespace bm {

Client::Client(ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(options), std::make_unique<zmq::context_t>())) {}

Client::Client(ClientOptions options, zmq::context_t& context)
    : impl_(std::make_unique<Impl>(std::move(options), context)) {}

Client::~Client() = default;

Result<PutResult> Client::Put(const BlockId& id, std::span<const std::byte> data,
                              StorageLevel level, const PutOptions& options) {
  return impl_->Put(id, data, level, options);
}

Result<PutResult> Client::PutChunks(const BlockId& id, const BlockData& data, StorageLevel level,
                                    const PutOptions& options) {
  return impl_->PutChunks(id, data, level, options);
}

Result<PutResult> Client::PutStream(const BlockId& id, std::istream& in, uint64_t size,
                                    StorageLevel level, const PutOptions& options) {
  return impl_->PutStream(id, in, size, level, options);
}

Result<PutResult> Client::PutStream(const BlockId& id, ByteSource source, uint64_t size,
                                    StorageLevel level, const PutOptions& options) {
  return impl_->PutStream(id, std::move(source), size, level, options);
}

Result<std::vector<std::byte>> Client::GetOrCompute(const BlockId& id, StorageLevel level,
                                                    const ComputeFn& compute) {
  return impl_->GetOrCompute(id, level, compute);
}

Status Client::RegisterRdd(uint64_t rdd_id, const std::string& name, StorageLevel level,
                           uint64_t total_partitions) {
  return impl_->RegisterRdd(rdd_id, name, level, total_partitions);
}

const CacheCounters& Client::counters() const { return impl_->counters(); }

CacheCounters Client::TakeCounters() { return impl_->TakeCounters(); }

bool Client::IsLocalAddress(const std::string& address) const {
  return impl_->IsLocalAddress(address);
}

Result<uint64_t> Client::Remove(const std::vector<BlockId>& ids) { return impl_->Remove(ids); }

Result<uint64_t> Client::RemoveRdd(uint64_t rdd_id) { return impl_->RemoveRdd(rdd_id); }

Result<std::vector<std::byte>> Client::Get(const BlockId& id) { return impl_->Get(id); }

Result<uint64_t> Client::GetTo(const BlockId& id, const ByteSink& sink) {
  return impl_->GetTo(id, sink);
}

Result<uint64_t> Client::GetTo(const BlockId& id, std::ostream& out) {
  return impl_->GetTo(id, out);
}

Result<BlockData> Client::GetChunks(const BlockId& id) { return impl_->GetChunks(id); }

std::optional<BlockData> Client::GetMapped(const BlockId& id) { return impl_->GetMapped(id); }

std::vector<Result<std::vector<std::byte>>> Client::GetMany(const std::vector<BlockId>& ids) {
  return impl_->GetMany(ids);
}

std::vector<Result<BlockData>> Client::GetManyChunks(const std::vector<BlockId>& ids) {
  return impl_->GetManyChunks(ids);
}

Result<std::vector<BlockLocations>> Client::Locations(const std::vector<BlockId>& ids) {
  return impl_->Locations(ids);
}

Result<std::vector<WorkerInfo>> Client::Workers() { return impl_->Workers(); }

Result<std::vector<LostBlockInfo>> Client::LostBlocks() { return impl_->LostBlocks(); }

Result<std::vector<CopyCheck>> Client::VerifyCopies(const std::vector<BlockLocations>& blocks) {
  return impl_->VerifyCopies(blocks);
}

Result<std::vector<BlockLocations>> Client::Blocks(std::optional<uint64_t> rdd_id) {
  return impl_->Blocks(rdd_id);
}

Status Client::ForEachBlockPage(
    std::optional<uint64_t> rdd_id,
    const std::function<Status(const std::vector<BlockLocations>&)>& visit, uint32_t page_size) {
  return impl_->ForEachBlockPage(rdd_id, visit, page_size);
}

Result<std::vector<RddInfo>> Client::Rdds() { return impl_->Rdds(); }

Status Client::Decommission(const std::string& worker_id) { return impl_->Decommission(worker_id); }

Status Client::Share(const std::string& dataset, const std::string& tenant, bool unshare) {
  return impl_->master().Share(dataset, tenant, unshare);
}

Status Client::SetQuota(const std::string& tenant, uint64_t memory_bytes, uint64_t disk_bytes) {
  return impl_->master().SetQuota(tenant, memory_bytes, disk_bytes, false);
}

Status Client::RemoveQuota(const std::string& tenant) {
  return impl_->master().SetQuota(tenant, 0, 0, true);
}

Result<std::vector<TenantInfo>> Client::Tenants() { return impl_->master().Tenants(); }

Status Client::PingMaster() { return impl_->PingMaster(); }
std::vector<MasterInfo> Client::Masters() { return impl_->Masters(); }

}  // namespace bm
