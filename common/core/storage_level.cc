#include "blockmgr/storage_level.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace bm {
namespace {

struct LevelInfo {
  StorageLevel level;
  std::string_view name;
  bool memory;
  bool disk;
  int replication;
};

constexpr std::array<LevelInfo, 6> kLevels = {{
    {StorageLevel::kMemoryOnly, "MEMORY_ONLY", true, false, 1},
    {StorageLevel::kMemoryAndDisk, "MEMORY_AND_DISK", true, true, 1},
    {StorageLevel::kDiskOnly, "DISK_ONLY", false, true, 1},
    {StorageLevel::kMemoryOnly2, "MEMORY_ONLY_2", true, false, 2},
    {StorageLevel::kMemoryAndDisk2, "MEMORY_AND_DISK_2", true, true, 2},
    {StorageLevel::kDiskOnly2, "DISK_ONLY_2", false, true, 2},
}};

const LevelInfo& InfoOf(StorageLevel level) {
  for (const LevelInfo& info : kLevels) {
    if (info.level == level) return info;
  }
  BM_CHECK(false && "unknown storage level");
  return kLevels[0];
}

}  // namespace

Result<StorageLevel> ParseStorageLevel(std::string_view text) {
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  for (const LevelInfo& info : kLevels) {
    if (info.name == upper) return info.level;
  }
  return InvalidArgumentError("unknown storage level '" + std::string(text.substr(0, 100)) +
                              "': expected one of " + StorageLevelNames());
}

std::string_view StorageLevelName(StorageLevel level) { return InfoOf(level).name; }

std::string StorageLevelNames() {
  std::string names;
  for (const LevelInfo& info : kLevels) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

bool UsesMemory(StorageLevel level) { return InfoOf(level).memory; }
bool UsesDisk(StorageLevel level) { return InfoOf(level).disk; }
int ReplicationOf(StorageLevel level) { return InfoOf(level).replication; }

}  // namespace bm
