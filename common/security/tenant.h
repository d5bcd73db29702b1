#pragma once

// Tenants (docs/security.md "Tenants, shares and quotas"): who owns a dataset, and what a key may
// do with the datasets it does not own. In one place for the master and the workers.
//
// A client key belongs to the tenant its allow-list names (NAME.tenant beside NAME.key holds
// the tenant's name), or to the default tenant when none is named. A tenant owns the datasets
// it creates: an RDD (every rdd_N_* block is dataset "rdd_N"), or a non-RDD block by its own id
// ("broadcast_3", "shuffle_1_2_3"). Another tenant may read a dataset its owner shared with
// it, and nothing else of it. Admin, worker and master keys are not restricted; neither is
// anyone on a cluster without keys.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/security/curve_keys.h"

namespace bm {

// The tenant of every key that names none.
inline constexpr std::string_view kDefaultTenant = "default";

// 1-64 letters, digits, '-', '_' or '.', not starting with '.'.
bool IsValidTenantName(std::string_view name);

// The dataset a block belongs to: "rdd_N" for rdd_N_P, else the block's own id.
std::string DatasetOf(const BlockId& id);
// "rdd_N", "N" (an RDD id) or a non-RDD block id: the dataset's canonical name, or
// kInvalidArgument.
Result<std::string> ParseDataset(std::string_view text);
// The RDD id of an "rdd_N" dataset.
std::optional<uint64_t> RddOfDataset(std::string_view dataset);

// The tenant a key given in `allow_dir` as KEY_PATH (DIR/NAME.key) belongs to: the first line of
// DIR/NAME.tenant, or empty when there is no such file. kInvalidArgument for a file that does
// not hold a valid tenant name.
Result<std::string> ReadTenantFile(const std::string& key_path);

// Whether requests from `peer` are held to tenant rules: client keys are; admin, worker and
// master keys, and unauthenticated peers of a cluster without keys, are not.
bool IsTenantRestricted(const std::optional<PeerIdentity>& peer);
// The tenant of a restricted peer (its named tenant or the default one).
std::string TenantOf(const PeerIdentity& peer);

// Who may do what with one dataset, as the master records it. `owner` empty: nobody owns it
// (nothing was stored in it yet): a put claims it for the putter's tenant, at the master.
struct DatasetAccess {
  std::string owner;
  std::vector<std::string> readers;  // tenants it is shared with, read-only; sorted
  // Grows with every change of the record, so a worker keeps the newest it heard of.
  uint64_t generation = 0;
  // The owner's memory quota (0: none) as the master told a worker along with the record (not
  // journaled with it): the owner's guaranteed share (worker/guaranteed_shares.h).
  uint64_t owner_memory_quota = 0;

  bool owned() const { return !owner.empty(); }
  bool operator==(const DatasetAccess&) const = default;
};

enum class DatasetOp {
  kRead,    // get, locate, list, get-or-compute of a cached block
  kWrite,   // put, describe (registerRdd), compute a missing block
  kRemove,  // removeBlocks, removeRdd
};
const char* DatasetOpName(DatasetOp op);

// Ok when `tenant` may do `op` on `dataset` under `access`; else kPermissionDenied naming the
// tenant and the dataset. A dataset nobody owns is open to every op (the caller claims it
// before it writes).
Status CheckDatasetAccess(std::string_view tenant, std::string_view dataset,
                          const DatasetAccess& access, DatasetOp op);

// Whether a put was refused because its tenant's quota is full: kOutOfSpace "quota exceeded".
bool IsQuotaExceeded(const Status& status);

}  // namespace bm
