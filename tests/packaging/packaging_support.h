#pragma once

// Shared by the packaging tests: running the project's own tools and the system's.

#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace bm::testing {

// The first of `candidates` that exists, or "" (for tools a machine may lack).
inline std::string FindTool(const std::vector<std::string>& candidates) {
  for (const std::string& path : candidates) {
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

// Runs `command` with /bin/sh -c (for pipes and environment assignments).
inline CommandResult Shell(const std::string& command,
                           std::chrono::milliseconds timeout = std::chrono::seconds(300)) {
  return RunCommand("/bin/sh", {"-c", command}, "", timeout);
}

inline std::string Describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

// `cmake --install` of this build into `prefix` (the default components: no /etc files).
inline CommandResult InstallInto(const std::string& prefix) {
  return RunCommand(BM_CMAKE_COMMAND, {"--install", BM_BUILD_DIR, "--prefix", prefix}, "",
                    std::chrono::seconds(300));
}

}  // namespace bm::testing
