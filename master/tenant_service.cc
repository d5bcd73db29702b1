#include "master/tenant_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/core/byte_size.h"
#include "master/master_request_kinds.h"

namespace bm {
namespace {

constexpr size_t kMaxDatasetNameBytes = 256;

Result<std::string> DatasetFromRequest(capnp::Text::Reader text) {
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

void FillDatasetAccess(const std::string& dataset, const DatasetAccess& access,
                       proto::DatasetAccessRecord::Builder out) {
  out.setDataset(dataset);
  out.setOwner(access.owner);
  auto readers = out.initReaders(static_cast<unsigned>(access.readers.size()));
  for (size_t i = 0; i < access.readers.size(); ++i) readers.set(i, access.readers[i]);
  out.setGeneration(access.generation);
  out.setOwnerMemoryQuota(access.owner_memory_quota);
}

bool TenantService::HasBlocks(const std::string& dataset) const {
  if (std::optional<uint64_t> rdd = RddOfDataset(dataset)) {
    return !index_.ListPage(*rdd, std::nullopt, 1).empty();
  }
  Result<BlockId> id = BlockId::Parse(dataset);
  return id.ok() && index_.Find(*id).has_value();
}

TenantRegistry::Claimed TenantService::Claim(const std::string& dataset, const std::string& tenant,
                                             bool has_blocks, TenantEffects& effects) {
  TenantRegistry::Claimed claimed = registry_.Claim(dataset, tenant, has_blocks);
  if (claimed.recorded) {
    spdlog::info("{} belongs to tenant '{}'", dataset, claimed.access.owner);
    effects.recorded.push_back(DatasetRecord{dataset, claimed.access});
  }
  return claimed;
}

Status TenantService::Check(const std::optional<PeerIdentity>& peer, const std::string& dataset,
                            DatasetOp op, TenantEffects& effects) {
  if (!IsTenantRestricted(peer)) return Status::Ok();
  const std::string tenant = TenantOf(*peer);
  if (op == DatasetOp::kWrite) {
    TenantRegistry::Claimed claimed = Claim(dataset, tenant, HasBlocks(dataset), effects);
    return CheckDatasetAccess(tenant, dataset, claimed.access, op);
  }
  return CheckDatasetAccess(tenant, dataset, registry_.Lookup(dataset, HasBlocks(dataset)), op);
}

Status TenantService::CheckBlocks(const std::optional<PeerIdentity>& peer,
                                  std::span<const BlockId> ids, DatasetOp op,
                                  TenantEffects& effects) {
  if (!IsTenantRestricted(peer)) return Status::Ok();
  std::set<std::string> datasets;
  for (const BlockId& id : ids) datasets.insert(DatasetOf(id));
  for (const std::string& dataset : datasets) {
    BM_RETURN_IF_ERROR(Check(peer, dataset, op, effects));
  }
  return Status::Ok();
}

Status TenantService::Admit(proto::Request::Reader request, const PeerIdentity& peer,
                            TenantEffects& effects) {
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
      return CheckBlocks(peer, blocks, DatasetOp::kRead, effects);
    case MasterTenantGating::kWrite:
      return CheckBlocks(peer, blocks, DatasetOp::kWrite, effects);
    case MasterTenantGating::kRemove:
      return CheckBlocks(peer, blocks, DatasetOp::kRemove, effects);
    case MasterTenantGating::kCompute:
      // A cached block is read; a missing one is computed and put: the caller's to write.
      for (const BlockId& id : blocks) {
        BM_RETURN_IF_ERROR(Check(peer, DatasetOf(id),
                                 index_.Find(id) ? DatasetOp::kRead : DatasetOp::kWrite, effects));
      }
      return Status::Ok();
    case MasterTenantGating::kLease:
      // Checked as a write without claiming: a lease was granted only to a tenant that may write
      // (kCompute claimed the dataset then), so a free dataset has no lease to renew.
      for (const BlockId& id : blocks) {
        const std::string dataset = DatasetOf(id);
        BM_RETURN_IF_ERROR(CheckDatasetAccess(TenantOf(peer), dataset,
                                              registry_.Lookup(dataset, HasBlocks(dataset)),
                                              DatasetOp::kWrite));
      }
      return Status::Ok();
  }
  return InternalError("unknown tenant gating");
}

ClientQueries::Visible TenantService::VisibleTo(const std::optional<PeerIdentity>& peer) const {
  if (!IsTenantRestricted(peer)) return nullptr;
  return [this, tenant = TenantOf(*peer)](const std::string& dataset) {
    // Lists show blocks, so a dataset nobody recorded here has some: the default tenant's.
    const DatasetAccess access = registry_.Lookup(dataset, /*has_blocks=*/true);
    return CheckDatasetAccess(tenant, dataset, access, DatasetOp::kRead).ok();
  };
}

Status TenantService::CheckAccess(proto::CheckAccess::Reader request, proto::Reply::Builder reply,
                                  TenantEffects& effects) {
  BM_ASSIGN_OR_RETURN(std::string dataset, DatasetFromRequest(request.getDataset()));
  BM_ASSIGN_OR_RETURN(std::string tenant, DecodeTenant(request.getTenant()));
  const bool has_blocks = HasBlocks(dataset);
  DatasetAccess access = request.getClaim() ? Claim(dataset, tenant, has_blocks, effects).access
                                            : registry_.Lookup(dataset, has_blocks);
  uint64_t reservation = 0;
  if (request.getReserveBytes() > 0 && access.owned()) {
    // A put the worker is about to take: only its owner's (the worker refuses others' anyway).
    BM_RETURN_IF_ERROR(CheckDatasetAccess(tenant, dataset, access, DatasetOp::kWrite));
    // Reserved against the owner's quota; an owner without one costs no pass over its blocks.
    if (registry_.QuotaOf(access.owner).has_value()) {
      capnp::Text::Reader block = request.getBlockId();
      const TenantRegistry::PutCopies put{
          .block = std::string(block.cStr(), std::min<size_t>(block.size(), 256)),
          .version = request.getVersion(),
          .copies = request.getCopies()};
      BM_ASSIGN_OR_RETURN(
          reservation, registry_.Reserve(access.owner, put, request.getReserveBytes(),
                                         FromProto(request.getLevel()), StoredBytes(access.owner)));
    }
  }
  if (std::optional<TenantQuota> quota = registry_.QuotaOf(access.owner)) {
    access.owner_memory_quota = quota->memory;
  }
  proto::AccessReply::Builder answer = reply.initAccess();
  FillDatasetAccess(dataset, access, answer.initAccess());
  answer.setReservation(reservation);
  return Status::Ok();
}

Status TenantService::ShareDataset(proto::ShareDataset::Reader request,
                                   const std::optional<PeerIdentity>& peer,
                                   proto::Reply::Builder reply, TenantEffects& effects) {
  BM_ASSIGN_OR_RETURN(std::string dataset, DatasetFromRequest(request.getDataset()));
  BM_ASSIGN_OR_RETURN(std::string reader, DecodeTenant(request.getTenant()));
  if (IsTenantRestricted(peer)) {
    const std::string tenant = TenantOf(*peer);
    const DatasetAccess access = registry_.Lookup(dataset, HasBlocks(dataset));
    if (access.owner != tenant) {
      return PermissionDeniedError("tenant '" + tenant + "' may not share " + dataset +
                                   ": only its owner or an admin key may");
    }
  }
  if (!registry_.datasets().contains(dataset) && HasBlocks(dataset)) {
    // Blocks nobody recorded (stored before tenants, or by an admin): the default tenant's.
    Claim(dataset, std::string(kDefaultTenant), true, effects);
  }
  BM_ASSIGN_OR_RETURN(DatasetAccess access, registry_.Share(dataset, reader, request.getUnshare()));
  spdlog::info("{} {} tenant '{}'", dataset,
               request.getUnshare() ? "is no longer shared with" : "is shared read-only with",
               reader);
  effects.recorded.push_back(DatasetRecord{dataset, access});
  TellWorkers(dataset, access, effects);
  reply.setOk();
  return Status::Ok();
}

void TenantService::TellWorkers(const std::string& dataset, DatasetAccess access,
                                TenantEffects& effects) const {
  if (std::optional<TenantQuota> quota = registry_.QuotaOf(access.owner)) {
    access.owner_memory_quota = quota->memory;
  }
  effects.to_workers.push_back(DatasetRecord{dataset, std::move(access)});
}

Status TenantService::SetQuota(proto::SetQuota::Reader request, proto::Reply::Builder reply,
                               TenantEffects& effects) {
  BM_ASSIGN_OR_RETURN(std::string tenant, DecodeTenant(request.getTenant()));
  std::optional<TenantQuota> quota;
  if (request.getRemove()) {
    if (!registry_.RemoveQuota(tenant)) {
      return NotFoundError("tenant '" + tenant + "' has no quota");
    }
    spdlog::info("tenant '{}' has no quota any more", tenant);
  } else {
    quota = TenantQuota{request.getMemoryBytes(), request.getDiskBytes()};
    registry_.SetQuota(tenant, *quota);
    spdlog::info("tenant '{}' may keep {} in memory and {} on disk", tenant,
                 quota->memory ? FormatBytes(quota->memory) : std::string("any amount"),
                 quota->disk ? FormatBytes(quota->disk) : std::string("any amount"));
  }
  effects.quotas.emplace_back(tenant, quota);
  // The workers' guaranteed shares follow the quota.
  for (const auto& [dataset, access] : registry_.datasets()) {
    if (access.owner == tenant) TellWorkers(dataset, access, effects);
  }
  reply.setOk();
  return Status::Ok();
}

TierBytes TenantService::StoredBytes(const std::string& tenant) const {
  // A lookup per dataset: the index keeps each RDD's totals (BlockIndex::RddBytes).
  TierBytes stored;
  auto add = [&](const TierBytes& bytes) {
    stored.memory += bytes.memory;
    stored.disk += bytes.disk;
  };
  for (const auto& [dataset, access] : registry_.datasets()) {
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

std::vector<TenantUsage> TenantService::Usages(const std::optional<std::string>& only) {
  registry_.ExpireReservations();
  std::map<std::string, uint64_t> datasets;  // tenant -> datasets owned
  for (const auto& [dataset, access] : registry_.datasets()) ++datasets[access.owner];
  for (const auto& [tenant, quota] : registry_.quotas()) datasets.try_emplace(tenant, 0);
  if (only) {
    std::erase_if(datasets, [&](const auto& entry) { return entry.first != *only; });
    datasets.try_emplace(*only, 0);
  }
  std::vector<TenantUsage> usages;
  for (const auto& [tenant, count] : datasets) {
    const TierBytes stored = StoredBytes(tenant);
    const TierBytes reserved = registry_.Reserved(tenant);
    const TenantQuota quota = registry_.QuotaOf(tenant).value_or(TenantQuota{});
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

void TenantService::ListTenants(const std::optional<PeerIdentity>& peer,
                                proto::Reply::Builder reply) {
  std::optional<std::string> only;
  if (IsTenantRestricted(peer)) only = TenantOf(*peer);
  const std::vector<TenantUsage> usages = Usages(only);
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

void TenantService::Restore(std::span<const std::pair<std::string, DatasetAccess>> datasets,
                            std::span<const std::pair<std::string, TenantQuota>> quotas) {
  for (const auto& [dataset, access] : datasets) registry_.Restore(dataset, access);
  for (const auto& [tenant, quota] : quotas) registry_.SetQuota(tenant, quota);
}

}  // namespace bm
