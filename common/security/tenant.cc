#include "common/security/tenant.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>

namespace bm {

bool IsValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::string DatasetOf(const BlockId& id) {
  if (std::optional<uint64_t> rdd = id.rdd_id()) return "rdd_" + std::to_string(*rdd);
  return id.ToString();
}

std::optional<uint64_t> RddOfDataset(std::string_view dataset) {
  if (!dataset.starts_with("rdd_")) return std::nullopt;
  const std::string_view digits = dataset.substr(4);
  uint64_t value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
      (digits.size() > 1 && digits.front() == '0')) {
    return std::nullopt;
  }
  return value;
}

Result<std::string> ParseDataset(std::string_view text) {
  if (!text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    std::string as_rdd = "rdd_" + std::string(text);
    if (RddOfDataset(as_rdd)) return as_rdd;
  }
  if (RddOfDataset(text)) return std::string(text);
  Result<BlockId> block = BlockId::Parse(text);
  if (!block.ok() || block->is_rdd()) {
    return InvalidArgumentError("'" + std::string(text) +
                                "' is not a dataset: an RDD id (42 or rdd_42) or a non-RDD block "
                                "id (broadcast_3, shuffle_1_2_3)");
  }
  return block->ToString();
}

Result<std::string> ReadTenantFile(const std::string& key_path) {
  const std::filesystem::path path = std::filesystem::path(key_path).replace_extension(".tenant");
  std::ifstream in(path);
  if (!in) return std::string();
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  if (!IsValidTenantName(line)) {
    return InvalidArgumentError(path.string() + " does not hold a tenant name (1-64 letters, " +
                                "digits, '-', '_' or '.')");
  }
  return line;
}

bool IsQuotaExceeded(const Status& status) {
  return status.code() == StatusCode::kOutOfSpace &&
         status.message().find("quota exceeded") != std::string::npos;
}

bool IsTenantRestricted(const std::optional<PeerIdentity>& peer) {
  return peer && peer->role == KeyRole::kClient;
}

std::string TenantOf(const PeerIdentity& peer) {
  return peer.tenant.empty() ? std::string(kDefaultTenant) : peer.tenant;
}

const char* DatasetOpName(DatasetOp op) {
  switch (op) {
    case DatasetOp::kRead:
      return "read";
    case DatasetOp::kWrite:
      return "write";
    case DatasetOp::kRemove:
      return "remove";
  }
  return "use";
}

Status CheckDatasetAccess(std::string_view tenant, std::string_view dataset,
                          const DatasetAccess& access, DatasetOp op) {
  if (!access.owned() || access.owner == tenant) return Status::Ok();
  const bool reader =
      std::binary_search(access.readers.begin(), access.readers.end(), std::string(tenant));
  if (op == DatasetOp::kRead && reader) return Status::Ok();
  std::string why = reader ? "it is shared with it read-only" : "it belongs to another tenant";
  return PermissionDeniedError("tenant '" + std::string(tenant) + "' may not " + DatasetOpName(op) +
                               " " + std::string(dataset) + ": " + why);
}

}  // namespace bm
