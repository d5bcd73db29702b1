#include "bmctl/args.h"

#include <charconv>
#include <cmath>

namespace bm {
namespace {

std::string Quote(std::string_view text) { return "'" + std::string(text.substr(0, 100)) + "'"; }

bool AllDigits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

Result<std::vector<BlockId>> ParseBlockIds(const std::vector<std::string>& texts) {
  std::vector<BlockId> ids;
  ids.reserve(texts.size());
  for (const std::string& text : texts) {
    BM_ASSIGN_OR_RETURN(BlockId id, BlockId::Parse(text));
    ids.push_back(id);
  }
  return ids;
}

Result<uint64_t> ParseUnsigned(std::string_view what, std::string_view text) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (!AllDigits(text) || ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgumentError("bad " + std::string(what) + " " + Quote(text) +
                                ": expected a non-negative integer");
  }
  return value;
}

Result<std::chrono::milliseconds> ParseTimeout(std::string_view seconds) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(seconds.data(), seconds.data() + seconds.size(), value);
  constexpr double kMaxSeconds = 24 * 3600;
  if (seconds.empty() || ec != std::errc() || ptr != seconds.data() + seconds.size() ||
      !std::isfinite(value) || value <= 0 || value > kMaxSeconds) {
    return InvalidArgumentError("bad timeout " + Quote(seconds) +
                                ": expected seconds, more than 0 and at most 86400");
  }
  // At least 1 ms, so a tiny positive timeout still waits a little.
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(value * 1000)));
}

Result<std::chrono::microseconds> ParseComputeCost(std::string_view text) {
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const std::string_view unit(ptr, static_cast<size_t>(text.data() + text.size() - ptr));
  double scale = 0;  // microseconds per unit
  if (unit.empty() || unit == "s") {
    scale = 1e6;
  } else if (unit == "ms") {
    scale = 1e3;
  } else if (unit == "us") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60e6;
  } else if (unit == "h") {
    scale = 3600e6;
  }
  constexpr double kMaxMicros = 7 * 24 * 3600e6;
  if (text.empty() || ec != std::errc() || scale == 0 || !std::isfinite(value) || value < 0 ||
      value * scale > kMaxMicros) {
    return InvalidArgumentError("bad compute cost " + Quote(text) +
                                ": expected a duration such as 2.5s, 150ms, 300us, 2m or 1h, "
                                "at least 0 and at most a week");
  }
  return std::chrono::microseconds(std::llround(value * scale));
}

}  // namespace bm
