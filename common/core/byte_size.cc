#include "common/core/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace bm {

Result<uint64_t> ParseByteSize(std::string_view text) {
  auto bad = [&]() {
    return InvalidArgumentError("bad size '" + std::string(text.substr(0, 100)) +
                                "': expected a number with an optional unit, e.g. 512MiB or 4GiB");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  std::string number(text.substr(0, i));
  if (number.empty()) return bad();
  std::string unit;
  for (char c : text.substr(i)) {
    if (c == ' ') continue;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  double multiplier;
  if (unit.empty() || unit == "b")
    multiplier = 1;
  else if (unit == "k" || unit == "ki" || unit == "kib")
    multiplier = kKiB;
  else if (unit == "m" || unit == "mi" || unit == "mib")
    multiplier = kMiB;
  else if (unit == "g" || unit == "gi" || unit == "gib")
    multiplier = kGiB;
  else if (unit == "t" || unit == "ti" || unit == "tib")
    multiplier = 1024.0 * kGiB;
  else if (unit == "kb")
    multiplier = 1e3;
  else if (unit == "mb")
    multiplier = 1e6;
  else if (unit == "gb")
    multiplier = 1e9;
  else if (unit == "tb")
    multiplier = 1e12;
  else
    return bad();

  double value = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size()) return bad();
  double bytes = value * multiplier;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) return bad();
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

}  // namespace bm
