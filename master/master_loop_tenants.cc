#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/byte_size.h"
#include "common/protocol.h"
#include "master/master_loop.h"
#include "master/master_request_kinds.h"
#include "master/request_decoding.h"

// The master's loop: tenants (dataset owners and shares) and their quotas (docs/MANUAL.md "Tenants,
// shares and quotas"; PROTOCOL.md "Tenants"). The rules are common/tenant.h's, the state
// TenantRegistry's; here the loop checks requests against them, journals the changes and tells
// the workers, which check the requests that reach them directly.

namespace bm {
namespace {

constexpr size_t kMaxDatasetNameBytes = 256;

void FillAccess(const std::string& dataset, const DatasetAccess& access,
                proto::DatasetAccessRecord::Builder out) {
  out.setDataset(dataset);
  out.setOwner(access.owner);
  auto readers = out.initReaders(static_cast<unsigned>(access.readers.size()));
  for (size_t i = 0; i < access.readers.size(); ++i) readers.set(i, access.readers[i]);
  out.setGeneration(access.generation);
  out.setOwnerMemoryQuota(access.owner_memory_quota);
}

Result<std::string> DecodeDataset(capnp::Text::Reader text) {
  if (text.size() > kMaxDatasetNameBytes) return InvalidArgumentError("dataset name too long");
  return ParseDataset(std::string_view(text.cStr(), text.size()));
}

Result<std::string> DecodeTenant(capnp::Text::Reader text) {
  std::string tenant(text.cStr(), std::min<size_t>(text.size(), 128));
  if (!IsValidTenantName(tenant)) {
    return InvalidArgumentError("'" + tenant +
                                "' is not a tenant name (1-64 letters, digits, '-', '_' or '.')");
  }
  return tenant;
}

}  // namespace

bool MasterServer::Loop::DatasetHasBlocks(const std::string& dataset) const {
  if (std::optional<uint64_t> rdd = RddOfDataset(dataset)) {
    return !index_.ListPage(*rdd, std::nullopt, 1).empty();
  }
  Result<BlockId> id = BlockId::Parse(dataset);
  return id.ok() && index_.Find(*id).has_value();
}

void MasterServer::Loop::DatasetRecorded(const std::string& dataset, const DatasetAccess& access) {
  spdlog::info("{} belongs to tenant '{}'", dataset, access.owner);
  if (journal_) Journaled(journal_->RecordDataset(dataset, access));
}

Status MasterServer::Loop::CheckTenant(const std::optional<PeerIdentity>& peer,
                                       const std::string& dataset, DatasetOp op) {
  if (!IsTenantRestricted(peer)) return Status::Ok();
  const std::string tenant = TenantOf(*peer);
  if (op == DatasetOp::kWrite) {
    TenantRegistry::Claimed claimed = tenants_.Claim(dataset, tenant, DatasetHasBlocks(dataset));
    if (claimed.recorded) DatasetRecorded(dataset, claimed.access);
    return CheckDatasetAccess(tenant, dataset, claimed.access, op);
  }
  return CheckDatasetAccess(tenant, dataset, tenants_.Lookup(dataset, DatasetHasBlocks(dataset)),
                            op);
}

Status MasterServer::Loop::CheckTenantBlocks(const std::optional<PeerIdentity>& peer,
                                             std::span<const BlockId> ids, DatasetOp op) {
  if (!IsTenantRestricted(peer)) return Status::Ok();
  std::set<std::string> datasets;
  for (const BlockId& id : ids) datasets.insert(DatasetOf(id));
  for (const std::string& dataset : datasets) BM_RETURN_IF_ERROR(CheckTenant(peer, dataset, op));
  return Status::Ok();
}

Status MasterServer::Loop::AdmitTenant(proto::Request::Reader request, const PeerIdentity& peer) {
  const MasterRequestKind* kind = FindMasterRequestKind(request.which());
  if (kind == nullptr) {
    return PermissionDeniedError("request kind " +
                                 std::to_string(static_cast<int>(request.which())) +
                                 " is not open to tenant key '" + peer.name + "'");
  }
  std::vector<BlockId> blocks;
  if (kind->named_blocks != nullptr) {
    BM_ASSIGN_OR_RETURN(blocks, kind->named_blocks(request));
  }
  switch (kind->gating) {
    case MasterTenantGating::kNeutral:
    case MasterTenantGating::kFiltered:
    case MasterTenantGating::kOwner:
    case MasterTenantGating::kNotServed:  // the dispatcher answers "unsupported"
      return Status::Ok();
    case MasterTenantGating::kRefused:
      // The access policy refuses these to client keys already; this holds if it ever did not.
      return PermissionDeniedError(std::string(kind->name) + " is not allowed for tenant key '" +
                                   peer.name + "'");
    case MasterTenantGating::kRead:
      return CheckTenantBlocks(peer, blocks, DatasetOp::kRead);
    case MasterTenantGating::kWrite:
      return CheckTenantBlocks(peer, blocks, DatasetOp::kWrite);
    case MasterTenantGating::kRemove:
      return CheckTenantBlocks(peer, blocks, DatasetOp::kRemove);
    case MasterTenantGating::kCompute:
      // A cached block is read; a missing one is computed and put: the caller's to write.
      for (const BlockId& id : blocks) {
        BM_RETURN_IF_ERROR(CheckTenant(peer, DatasetOf(id),
                                       index_.Find(id) ? DatasetOp::kRead : DatasetOp::kWrite));
      }
      return Status::Ok();
    case MasterTenantGating::kLease:
      // Checked as a write without claiming: a lease was granted only to a tenant that may write
      // (kCompute claimed the dataset then), so a free dataset has no lease to renew.
      for (const BlockId& id : blocks) {
        const std::string dataset = DatasetOf(id);
        BM_RETURN_IF_ERROR(CheckDatasetAccess(TenantOf(peer), dataset,
                                              tenants_.Lookup(dataset, DatasetHasBlocks(dataset)),
                                              DatasetOp::kWrite));
      }
      return Status::Ok();
  }
  return InternalError("unknown tenant gating");
}

ClientQueries::Visible MasterServer::Loop::VisibleTo(
    const std::optional<PeerIdentity>& peer) const {
  if (!IsTenantRestricted(peer)) return nullptr;
  return [this, tenant = TenantOf(*peer)](const std::string& dataset) {
    // Lists show blocks, so a dataset nobody recorded here has some: the default tenant's.
    const DatasetAccess access = tenants_.Lookup(dataset, /*has_blocks=*/true);
    return CheckDatasetAccess(tenant, dataset, access, DatasetOp::kRead).ok();
  };
}

Status MasterServer::Loop::HandleCheckAccess(proto::CheckAccess::Reader request,
                                             proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(std::string dataset, DecodeDataset(request.getDataset()));
  BM_ASSIGN_OR_RETURN(std::string tenant, DecodeTenant(request.getTenant()));
  const bool has_blocks = DatasetHasBlocks(dataset);
  DatasetAccess access;
  if (request.getClaim()) {
    TenantRegistry::Claimed claimed = tenants_.Claim(dataset, tenant, has_blocks);
    if (claimed.recorded) DatasetRecorded(dataset, claimed.access);
    access = std::move(claimed.access);
  } else {
    access = tenants_.Lookup(dataset, has_blocks);
  }
  uint64_t reservation = 0;
  if (request.getReserveBytes() > 0 && access.owned()) {
    // A put the worker is about to take: only its owner's (the worker refuses others' anyway).
    BM_RETURN_IF_ERROR(CheckDatasetAccess(tenant, dataset, access, DatasetOp::kWrite));
    // Reserved against the owner's quota; an owner without one costs no pass over its blocks.
    if (tenants_.QuotaOf(access.owner).has_value()) {
      capnp::Text::Reader block = request.getBlockId();
      const TenantRegistry::PutCopies put{
          .block = std::string(block.cStr(), std::min<size_t>(block.size(), 256)),
          .version = request.getVersion(),
          .copies = request.getCopies()};
      BM_ASSIGN_OR_RETURN(
          reservation, tenants_.Reserve(access.owner, put, request.getReserveBytes(),
                                        FromProto(request.getLevel()), StoredBytes(access.owner)));
    }
  }
  if (std::optional<TenantQuota> quota = tenants_.QuotaOf(access.owner)) {
    access.owner_memory_quota = quota->memory;
  }
  proto::AccessReply::Builder answer = reply.initAccess();
  FillAccess(dataset, access, answer.initAccess());
  answer.setReservation(reservation);
  return Status::Ok();
}

Status MasterServer::Loop::HandleShareDataset(proto::ShareDataset::Reader request,
                                              const std::optional<PeerIdentity>& peer,
                                              proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(std::string dataset, DecodeDataset(request.getDataset()));
  BM_ASSIGN_OR_RETURN(std::string reader, DecodeTenant(request.getTenant()));
  if (IsTenantRestricted(peer)) {
    const std::string tenant = TenantOf(*peer);
    const DatasetAccess access = tenants_.Lookup(dataset, DatasetHasBlocks(dataset));
    if (access.owner != tenant) {
      return PermissionDeniedError("tenant '" + tenant + "' may not share " + dataset +
                                   ": only its owner or an admin key may");
    }
  }
  if (!tenants_.datasets().contains(dataset) && DatasetHasBlocks(dataset)) {
    // Blocks nobody recorded (stored before tenants, or by an admin): the default tenant's.
    TenantRegistry::Claimed claimed = tenants_.Claim(dataset, std::string(kDefaultTenant), true);
    if (claimed.recorded) DatasetRecorded(dataset, claimed.access);
  }
  BM_ASSIGN_OR_RETURN(DatasetAccess access, tenants_.Share(dataset, reader, request.getUnshare()));
  spdlog::info("{} {} tenant '{}'", dataset,
               request.getUnshare() ? "is no longer shared with" : "is shared read-only with",
               reader);
  if (journal_) Journaled(journal_->RecordDataset(dataset, access));
  TellWorkers(dataset, access);
  reply.setOk();
  return Status::Ok();
}

void MasterServer::Loop::TellWorkers(const std::string& dataset, DatasetAccess access) {
  if (std::optional<TenantQuota> quota = tenants_.QuotaOf(access.owner)) {
    access.owner_memory_quota = quota->memory;
  }
  // Workers keep the records they asked for: each hears of the change (PROTOCOL.md, "Tenants").
  for (const WorkerRecord& worker : registry_.List()) {
    capnp::MallocMessageBuilder message;
    FillAccess(dataset, access, message.initRoot<proto::Request>().initDatasetAccess());
    WarnIfUnsent(worker.id, links_.Send(worker.id, message));
  }
}

Status MasterServer::Loop::HandleSetQuota(proto::SetQuota::Reader request,
                                          proto::Reply::Builder reply) {
  BM_ASSIGN_OR_RETURN(std::string tenant, DecodeTenant(request.getTenant()));
  std::optional<TenantQuota> quota;
  if (request.getRemove()) {
    if (!tenants_.RemoveQuota(tenant)) {
      return NotFoundError("tenant '" + tenant + "' has no quota");
    }
    spdlog::info("tenant '{}' has no quota any more", tenant);
  } else {
    quota = TenantQuota{request.getMemoryBytes(), request.getDiskBytes()};
    tenants_.SetQuota(tenant, *quota);
    spdlog::info("tenant '{}' may keep {} in memory and {} on disk", tenant,
                 quota->memory ? FormatBytes(quota->memory) : std::string("any amount"),
                 quota->disk ? FormatBytes(quota->disk) : std::string("any amount"));
  }
  if (journal_) Journaled(journal_->RecordQuota(tenant, quota));
  // The workers' guaranteed shares follow the quota.
  for (const auto& [dataset, access] : tenants_.datasets()) {
    if (access.owner == tenant) TellWorkers(dataset, access);
  }
  reply.setOk();
  return Status::Ok();
}

TierBytes MasterServer::Loop::StoredBytes(const std::string& tenant) const {
  // A lookup per dataset: the index keeps each RDD's totals (BlockIndex::RddBytes).
  TierBytes stored;
  auto add = [&](const TierBytes& bytes) {
    stored.memory += bytes.memory;
    stored.disk += bytes.disk;
  };
  for (const auto& [dataset, access] : tenants_.datasets()) {
    if (access.owner != tenant) continue;
    if (std::optional<uint64_t> rdd = RddOfDataset(dataset)) {
      add(index_.RddBytes(*rdd));
    } else if (Result<BlockId> id = BlockId::Parse(dataset); id.ok()) {
      if (std::optional<BlockInfo> info = index_.Find(*id)) {
        for (const IndexedLocation& location : info->locations) {
          stored.on(location.tier) += location.size;
        }
      }
    }
  }
  return stored;
}

std::vector<TenantUsage> MasterServer::Loop::TenantUsages(const std::optional<std::string>& only) {
  tenants_.ExpireReservations();
  std::map<std::string, uint64_t> datasets;  // tenant -> datasets owned
  for (const auto& [dataset, access] : tenants_.datasets()) ++datasets[access.owner];
  for (const auto& [tenant, quota] : tenants_.quotas()) datasets.try_emplace(tenant, 0);
  if (only) {
    std::erase_if(datasets, [&](const auto& entry) { return entry.first != *only; });
    datasets.try_emplace(*only, 0);
  }
  std::vector<TenantUsage> usages;
  for (const auto& [tenant, count] : datasets) {
    const TierBytes stored = StoredBytes(tenant);
    const TierBytes reserved = tenants_.Reserved(tenant);
    const TenantQuota quota = tenants_.QuotaOf(tenant).value_or(TenantQuota{});
    usages.push_back(TenantUsage{.tenant = tenant,
                                 .memory_bytes = stored.memory,
                                 .disk_bytes = stored.disk,
                                 .memory_quota = quota.memory,
                                 .disk_quota = quota.disk,
                                 .reserved_bytes = reserved.memory + reserved.disk,
                                 .datasets = count});
  }
  return usages;
}

void MasterServer::Loop::HandleListTenants(const std::optional<PeerIdentity>& peer,
                                           proto::Reply::Builder reply) {
  std::optional<std::string> only;
  if (IsTenantRestricted(peer)) only = TenantOf(*peer);
  const std::vector<TenantUsage> usages = TenantUsages(only);
  auto out = reply.initTenants(static_cast<unsigned>(usages.size()));
  for (unsigned i = 0; i < usages.size(); ++i) {
    const TenantUsage& usage = usages[i];
    out[i].setTenant(usage.tenant);
    out[i].setMemoryBytes(usage.memory_bytes);
    out[i].setDiskBytes(usage.disk_bytes);
    out[i].setMemoryQuota(usage.memory_quota);
    out[i].setDiskQuota(usage.disk_quota);
    out[i].setReservedBytes(usage.reserved_bytes);
    out[i].setDatasets(usage.datasets);
  }
}

void MasterServer::Loop::RestoreTenants(const JournalSnapshot& snapshot) {
  for (const auto& [dataset, access] : snapshot.datasets) tenants_.Restore(dataset, access);
  for (const auto& [tenant, quota] : snapshot.quotas) tenants_.SetQuota(tenant, quota);
}

}  // namespace bm
