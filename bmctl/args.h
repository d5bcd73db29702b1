#pragma once

// Checks of bmctl's arguments, done before anything is sent so a usage error (exit 2) is never
// mistaken for a failure of the cluster (exit 1). Pure functions.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"

namespace bm {

// Every id parsed, or kInvalidArgument naming the first bad one.
Result<std::vector<BlockId>> ParseBlockIds(const std::vector<std::string>& texts);

// A non-negative decimal that fits in 64 bits ("7"), e.g. an RDD id. `what` names it in the
// error: "bad RDD id '-1': expected a non-negative integer".
Result<uint64_t> ParseUnsigned(std::string_view what, std::string_view text);

// Seconds, possibly fractional ("5", "0.5"), more than 0 and at most a day.
Result<std::chrono::milliseconds> ParseTimeout(std::string_view seconds);

// A block's compute cost (`bmctl put --compute-cost`): a number with a unit, "2.5s", "150ms",
// "300us", "2m", "1h" (a bare number is seconds), at least 0 and at most a week.
Result<std::chrono::microseconds> ParseComputeCost(std::string_view text);

}  // namespace bm
