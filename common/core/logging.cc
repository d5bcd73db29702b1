#include "common/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace bm {

void InitLogging(const std::string& name, const std::string& level) {
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %n %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace bm
