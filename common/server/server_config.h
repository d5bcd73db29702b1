#pragma once

// Every flag of a server (bm-master, bm-worker) can also come from a config file and from the
// environment, for packages (/etc/blockmgr/*.toml) and containers. Header-only: the mains that
// use it already depend on CLI11, the libraries do not.

#include <CLI/CLI.hpp>
#include <cctype>
#include <string>
#include <string_view>

namespace bm {

// The environment variable of flag `--long-name` under `prefix`: BLOCKMGR_WORKER_LONG_NAME.
inline std::string FlagEnvName(std::string_view prefix, std::string_view flag) {
  std::string name(prefix);
  for (char c : flag) {
    name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

// Adds `--config FILE` (TOML, or INI with `key = value` lines; keys are the long flag names
// without dashes, e.g. `listen = "tcp://0.0.0.0:7077"`) and gives every long flag defined so
// far an environment variable, `prefix` + the flag in capitals (BLOCKMGR_MASTER_LISTEN). Call
// it after the last flag is added and before parsing. Where a value comes from, first match:
// the command line, then the config file, then the environment, then the default (CLI11's
// order). A key in the file that names no flag is an error, so a typo does not go unnoticed.
inline void AddConfigFileAndEnvironment(CLI::App& app, std::string_view prefix) {
  for (CLI::Option* option : app.get_options()) {
    const std::string& flag = option->get_single_name();
    if (option->get_lnames().empty() || flag == "help") continue;
    option->envname(FlagEnvName(prefix, flag));
  }
  app.set_config("--config", "",
                 "Read flags from this TOML/INI file (keys are the long flag names, e.g. "
                 "listen = \"tcp://0.0.0.0:7077\"); flags on the command line win");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

}  // namespace bm
