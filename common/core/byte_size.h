#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "blockmgr/status.h"

namespace bm {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// Parses sizes as operators write them: "512MiB", "4GiB", "1.5G", "64k", "1000000", "10MB".
// Binary units: K/Ki/KiB, M/Mi/MiB, G/Gi/GiB, T/Ti/TiB; decimal units: KB, MB, GB, TB.
// Case-insensitive; optional space before the unit.
Result<uint64_t> ParseByteSize(std::string_view text);

// "1.5 GiB", "512 B": for tables and messages.
std::string FormatBytes(uint64_t bytes);

}  // namespace bm
