#pragma once

// One bmctl subcommand as a unit that owns its arguments. bmctl's main (bmctl/main.cc) adds
// every command to the CLI11 app, parses, asks the parsed command to check its arguments, and
// only then connects to the master and runs it. A new command is a new class and one line in
// the list in bmctl_commands.cc.

#include <CLI/CLI.hpp>
#include <memory>

#include "blockmgr/client.h"
#include "blockmgr/status.h"
#include "bmctl/progress_line.h"

namespace bm {

// bmctl's exit codes: 0 success; 1 operational failure (one line on stderr); 2 usage error;
// 3 a put refused because its tenant's quota is exceeded (docs/security.md "Tenants, shares and
// quotas").
constexpr int kExitSuccess = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitQuotaExceeded = 3;

// How a command prints, from the global options.
struct OutputOptions {
  bool json = false;  // JSON for scripts instead of tables
  ProgressMode progress = ProgressMode::kAuto;
};

// A subcommand and its arguments. Created before parsing, used once by one thread.
class BmctlCommand {
 public:
  virtual ~BmctlCommand() = default;

  // Adds the subcommand, with its options bound to this object, to `app`, and returns it (owned
  // by `app`; this object must outlive the parse).
  virtual CLI::App* AddTo(CLI::App& app) = 0;

  // Checks what was parsed, before the master is contacted. An error is a usage error (exit 2)
  // and its message is what bmctl prints.
  [[nodiscard]] virtual Status Validate() = 0;

  // False for a command that runs without a cluster (keygen): no --master is needed and it
  // runs through RunLocally.
  virtual bool NeedsMaster() const { return true; }

  // Runs a validated command against the cluster; returns the exit code.
  virtual int Run(Client& client, const OutputOptions& output) = 0;

  // Runs a validated command that needs no master; returns the exit code. Only called when
  // NeedsMaster() is false.
  virtual int RunLocally();
};

// Prints "bmctl: <status>" on stderr; returns kExitFailure (kExitQuotaExceeded for a quota
// refusal).
int Fail(const Status& status);

// Flushes stdout; kExitSuccess, or kExitFailure (with the message) if writing failed.
int FlushStdout();

}  // namespace bm
