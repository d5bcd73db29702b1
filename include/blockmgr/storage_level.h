#pragma once

#include <string>
#include <string_view>

#include "blockmgr/status.h"

namespace bm {

// Spark's storage levels. The _2 forms keep two copies on distinct workers.
enum class StorageLevel {
  kMemoryOnly,
  kMemoryAndDisk,
  kDiskOnly,
  kMemoryOnly2,
  kMemoryAndDisk2,
  kDiskOnly2,
};

// "MEMORY_ONLY" etc.; case-insensitive. Fails with kInvalidArgument listing the valid names.
Result<StorageLevel> ParseStorageLevel(std::string_view text);
std::string_view StorageLevelName(StorageLevel level);
// The valid names, comma separated, for help texts and errors.
std::string StorageLevelNames();

bool UsesMemory(StorageLevel level);
bool UsesDisk(StorageLevel level);
int ReplicationOf(StorageLevel level);

}  // namespace bm
