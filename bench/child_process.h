#pragma once

// Child processes of the benchmark: the servers it measures (bm-master, bm-worker, redis,
// memcached, iperf3, the raw ZeroMQ peer) and its own client processes.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace bm::bench {

// A running child process, killed (SIGKILL) and reaped on destruction unless it already exited.
// Output goes to `log_path` (appended). Not thread-safe.
class ChildProcess {
 public:
  // kInternal when the binary cannot be started.
  static Result<ChildProcess> Start(const std::string& binary, const std::vector<std::string>& args,
                                    const std::string& log_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool Running();
  // SIGTERM, then SIGKILL if it has not exited within `grace`.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  void Reap(bool block);
  pid_t pid_ = -1;
};

struct CommandOutput {
  int exit_code = -1;  // 128+signal if killed; -1 if it ran past its timeout
  std::string out;     // stdout; stderr goes to the log file given
};

// Runs a command to completion and captures its stdout; kills it after `timeout`.
Result<CommandOutput> RunCommand(const std::string& binary, const std::vector<std::string>& args,
                                 const std::string& stderr_log, std::chrono::milliseconds timeout);

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); nullopt when unreadable.
std::optional<uint64_t> ProcStatusBytes(pid_t pid, const std::string& field);
// User plus system CPU seconds `pid` has used so far (all its threads); 0 when unreadable.
double ProcessCpuSeconds(pid_t pid);
// Resets the kernel's peak-RSS mark (VmHWM) of a process to its current RSS.
bool ResetPeakRss(pid_t pid);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeLoopbackPort();
// Whether something accepts TCP connections on 127.0.0.1:port.
bool PortAcceptsConnections(int port);
// Polls `ready` every 10 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& ready, std::chrono::milliseconds timeout);

// The directory holding this executable (bm-bench lives next to bm-master and bm-worker).
std::string OwnBinaryDir();
// The full path of `name` on PATH, or empty.
std::string FindOnPath(const std::string& name);

}  // namespace bm::bench
