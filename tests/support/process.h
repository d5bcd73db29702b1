#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bm::testing {

// Path of an executable built by this project (e.g. "bm-master").
std::string BinaryPath(const std::string& name);

// A free TCP port on 127.0.0.1 (bound once to port 0 and released; callers that lose the race
// to another process see their server fail to bind and pick again).
int FreeLoopbackPort();
std::string LoopbackEndpoint(int port);

// Polls `condition` every few milliseconds until it holds or `timeout` passes. Returns whether
// it held. This is how tests await state in other processes instead of sleeping.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// A child process; killed (SIGKILL) and reaped on destruction if still running. stdout and
// stderr go to `log_path` (appended).
class Process {
 public:
  static Process Start(const std::string& binary, const std::vector<std::string>& args,
                       const std::string& log_path);
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  bool Running();
  void Signal(int signal);
  // Waits for exit; the exit code (128+signal if killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGKILL and reap.
  void Kill();

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

struct CommandResult {
  int exit_code = -1;  // 128+signal if killed; -1 if it timed out
  std::string out;
  std::string err;
};

// Runs a command to completion, feeding `input` on stdin; kills it after `timeout`.
CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& input = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace bm::testing
