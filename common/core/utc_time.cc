#include "common/core/utc_time.h"

#include <ctime>

namespace bm {

std::string FormatUtcTime(uint64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &utc);
  return when;
}

}  // namespace bm
