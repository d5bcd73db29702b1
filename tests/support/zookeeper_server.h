#pragma once

// A real ZooKeeper server for the tests (Debian's `zookeeper` package, run with `java`), on a
// free loopback port with its data in a temporary directory. Free of GoogleTest.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "blockmgr/status.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {

struct ZooKeeperServerOptions {
  // Sessions may last from minSessionTimeout to maxSessionTimeout; short ticks let the tests
  // use sessions of a second or two, as blockmgr's masters do.
  int tick_ms = 250;
  int min_session_timeout_ms = 500;
  int max_session_timeout_ms = 30000;
  // The IPv4 address it listens on. Another than loopback for a server on a test host's own
  // address (tests/multihost): start it from a thread in that host's network namespace
  // (HostNetwork::RunIn), whose children and sockets live there.
  std::string address = "127.0.0.1";
};

// A standalone ZooKeeper server as a child process. Stop/Kill/Pause and Restart act on the
// process, which restarts on the same port with the same data directory (its sessions and
// znodes survive, as on a real server's restart). Killed on destruction. Not thread-safe.
class ZooKeeperServer {
 public:
  // Why tests skip where ZooKeeper is missing.
  static constexpr char kNotInstalled[] =
      "ZooKeeper is not installed: deploy/install-test-deps.sh installs it";
  // Whether java and ZooKeeper's jars are installed.
  static bool Available();

  // Starts the server and waits until it serves. kUnavailable when it does not within 60 s
  // (the log says why), kInternal when java cannot be started.
  static Result<std::unique_ptr<ZooKeeperServer>> Start(ZooKeeperServerOptions options = {});
  ~ZooKeeperServer();
  ZooKeeperServer(const ZooKeeperServer&) = delete;
  ZooKeeperServer& operator=(const ZooKeeperServer&) = delete;

  // "ADDRESS:PORT", to which a test appends its chroot ("/test-name").
  std::string connect_string() const;
  int port() const { return port_; }
  const std::string& log_path() const { return log_path_; }

  // SIGTERM, then SIGKILL after a grace period; and SIGKILL at once.
  void Stop();
  void Kill();
  // SIGSTOP / SIGCONT: the server falls silent with its connections open, as a hung or
  // partitioned server does.
  void Pause();
  void Resume();
  // Starts the stopped server again on the same port and data, and waits until it serves.
  Status Restart();
  bool Running();

  // The answer to a four-letter command (ruok, srvr, wchp, wchc and cons are allowed), or
  // empty when the server does not answer within a second. (Asked from the calling thread's
  // network namespace.)
  std::string Command(const std::string& word) const;

 private:
  explicit ZooKeeperServer(ZooKeeperServerOptions options);
  // Writes the config for port_ and starts the process; waits until it serves.
  Status Launch();
  bool Serving() const;

  const ZooKeeperServerOptions options_;
  TempDir dir_;
  std::string log_path_;
  int port_ = 0;
  std::optional<Process> process_;
};

}  // namespace bm::testing
