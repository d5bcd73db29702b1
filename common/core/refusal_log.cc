#include "common/core/refusal_log.h"

#include <spdlog/spdlog.h>

namespace bm {

void RefusalLog::Warn(const std::string& what) {
  const auto now = std::chrono::steady_clock::now();
  if (last_line_ != std::chrono::steady_clock::time_point{} && now - last_line_ < interval_) {
    ++not_logged_;
    return;
  }
  if (not_logged_ > 0) {
    spdlog::warn("{} (and {} more refusals since the last such line)", what, not_logged_);
  } else {
    spdlog::warn("{}", what);
  }
  last_line_ = now;
  not_logged_ = 0;
}

}  // namespace bm
