#pragma once

#include <cstdint>
#include <string>

namespace bm {

// "2026-12-04 13:05:09 UTC" for a time in milliseconds since the Unix epoch: how bmctl, the
// client's errors and the status pages show when something happened (a block was lost, say).
std::string FormatUtcTime(uint64_t unix_ms);

}  // namespace bm
