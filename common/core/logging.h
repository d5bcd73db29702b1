#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace bm {

// Sets up spdlog for a server process: timestamped lines on stderr, tagged with `name`.
// `level` is one of trace, debug, info, warn, error.
void InitLogging(const std::string& name, const std::string& level);

}  // namespace bm
