#include "tests/support/cluster_keys.h"

#include "common/security/curve_keys.h"

namespace bm::testing {

Status GenerateClusterKeys(const std::string& dir, const std::vector<std::string>& worker_ids) {
  BM_RETURN_IF_ERROR(GenerateCertificate(dir, "master", KeyRole::kMaster));
  BM_RETURN_IF_ERROR(GenerateCertificate(dir, "admin", KeyRole::kAdmin));
  BM_RETURN_IF_ERROR(GenerateCertificate(dir, "client", KeyRole::kClient));
  for (const std::string& id : worker_ids) {
    BM_RETURN_IF_ERROR(GenerateCertificate(dir, id, KeyRole::kWorker));
  }
  return Status::Ok();
}

}  // namespace bm::testing
