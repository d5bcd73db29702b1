#pragma once

// Child processes of the tests and of bm-bench: servers on free loopback ports, tools run to
// completion. Free of GoogleTest, so that bm-bench links it too.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm::testing {

// Path of an executable built by this project (e.g. "bm-master").
std::string BinaryPath(const std::string& name);
// The full path of `name` on PATH, or empty.
std::string FindOnPath(const std::string& name);

// A free TCP port on 127.0.0.1 (bound once to port 0 and released; callers that lose the race
// to another process see their server fail to bind and pick again).
int FreeLoopbackPort();
std::string LoopbackEndpoint(int port);
// Whether something accepts TCP connections on 127.0.0.1:port.
bool PortAcceptsConnections(int port);
// A field of /proc/PID/status in KiB ("VmHWM", "VmRSS"); 0 if unreadable.
uint64_t ProcStatusKiB(pid_t pid, const std::string& field);

// Polls `condition` every 10 ms until it holds or `timeout` passes. Returns whether it held.
// This is how tests await state in other processes instead of sleeping.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

// A child process; killed (SIGKILL) and reaped on destruction if still running. stdout and
// stderr go to `log_path` (appended). Not thread-safe.
class Process {
 public:
  // kInternal when the binary cannot be started.
  static Result<Process> Spawn(const std::string& binary, const std::vector<std::string>& args,
                               const std::string& log_path);
  // As Spawn, throwing std::runtime_error when the binary cannot be started (a test then fails
  // with the reason).
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
  // SIGTERM, then SIGKILL if it has not exited within `grace`; reaped.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  // SIGKILL and reap.
  void Kill();

 private:
  explicit Process(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// A command to run to completion.
struct Command {
  std::string binary;
  std::vector<std::string> args;
  std::string input{};  // written to its stdin, which is then closed
  // Empty: stderr is captured in CommandResult::err. Otherwise it is appended to this file.
  std::string stderr_log{};
  // Then it is killed (exit code -1).
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

struct CommandResult {
  int exit_code = -1;  // 128+signal if killed; -1 if it timed out
  std::string out;
  std::string err;
};

// Runs `command` to completion. kInternal when it cannot be started.
Result<CommandResult> RunCommand(const Command& command);
// Runs a command to completion, feeding `input` on stdin; kills it after `timeout`. Throws
// std::runtime_error when it cannot be started (a test then fails with the reason).
CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         const std::string& input = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace bm::testing
