#include "blockmgr/block_id.h"

#include <charconv>
#include <vector>

namespace bm {
namespace {

// Splits "a_b_c" on '_' into its parts.
std::vector<std::string_view> SplitUnderscore(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find('_', start);
    if (pos == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, pos - start));
    start = pos + 1;
  }
}

// A canonical non-negative decimal: digits only, no sign, no leading zeros, fits in 64 bits.
std::optional<uint64_t> ParseNumber(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  if (s.size() > 1 && s[0] == '0') return std::nullopt;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

Result<BlockId> BlockId::Parse(std::string_view text) {
  auto bad = [&]() {
    return InvalidArgumentError(
        "bad block id '" + std::string(text.substr(0, 200)) +
        "': expected rdd_<rdd>_<partition>, broadcast_<id> or shuffle_<shuffle>_<map>_<reduce>");
  };
  std::vector<std::string_view> parts = SplitUnderscore(text);
  std::vector<uint64_t> numbers;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::optional<uint64_t> n = ParseNumber(parts[i]);
    if (!n) return bad();
    numbers.push_back(*n);
  }
  if (parts[0] == "rdd" && numbers.size() == 2) return Rdd(numbers[0], numbers[1]);
  if (parts[0] == "broadcast" && numbers.size() == 1) return Broadcast(numbers[0]);
  if (parts[0] == "shuffle" && numbers.size() == 3) {
    return Shuffle(numbers[0], numbers[1], numbers[2]);
  }
  return bad();
}

std::string BlockId::ToString() const {
  switch (kind_) {
    case Kind::kRdd:
      return "rdd_" + std::to_string(a_) + "_" + std::to_string(b_);
    case Kind::kBroadcast:
      return "broadcast_" + std::to_string(a_);
    case Kind::kShuffle:
      return "shuffle_" + std::to_string(a_) + "_" + std::to_string(b_) + "_" + std::to_string(c_);
  }
  return "invalid";
}

size_t BlockId::Hash() const {
  // splitmix64-style mixing of the four fields.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(static_cast<uint64_t>(kind_));
  h = mix(h ^ a_);
  h = mix(h ^ b_);
  h = mix(h ^ c_);
  return static_cast<size_t>(h);
}

}  // namespace bm
