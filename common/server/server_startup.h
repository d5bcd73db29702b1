#pragma once

// The start-up steps bm-master and bm-worker share between parsing their flags and creating
// their server: the keys (--key, --allow, the ZAP handler, SIGHUP), the status pages (--http),
// and how a failed start ends (the reason on stderr, an exit code scripts and systemd read).
// What only one of them does stays in its main.cc.

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>
#include <zmq.hpp>

#include "blockmgr/status.h"
#include "common/http/http_server.h"
#include "common/security/curve_keys.h"
#include "common/security/node_security.h"
#include "common/server/shutdown_signals.h"

namespace bm {

// A flag the operator must change, and a start that failed for another reason.
inline constexpr int kUsageExit = 2;
inline constexpr int kStartExit = 1;

// Prints "<program>: <why>" to stderr; returns `exit_code`.
int StartFailed(std::string_view program, const Status& why, int exit_code);
// As above, with kUsageExit for kInvalidArgument (a flag's value) and kStartExit otherwise.
int StartFailed(std::string_view program, const Status& why);

// Nothing without --key (`key_file` empty). Else the node's certificate is checked for `role`
// and the ZAP handler started on `context` (before any server socket binds: libzmq 4.3 lets
// any key in while no handler is bound), trusting the master key read from
// `master_key_file` (a worker's --master-key; empty for a master, which trusts its own), and
// SIGHUP re-reads the allow folder.
Result<SecureNode> StartServerKeys(zmq::context_t& context, const std::string& key_file,
                                   KeyRole role, const std::string& allow_dir,
                                   const std::string& master_key_file, ShutdownSignals& signals);

// The status pages (--http): makes the server's status service, adds its routes and starts
// `http` on `listen`; a null service when `listen` is empty. A listen address that does not
// parse is kInvalidArgument, naming --http.
template <typename Service, typename AddRoutes>
Result<std::unique_ptr<Service>> StartStatusPages(HttpServer& http, const std::string& listen,
                                                  AddRoutes add_routes) {
  if (listen.empty()) return std::unique_ptr<Service>();
  BM_ASSIGN_OR_RETURN(std::unique_ptr<Service> service, Service::Create());
  add_routes(http, *service);
  if (Status started = http.Start(listen); !started.ok()) {
    return Status(started.code(), "--http: " + started.message());
  }
  spdlog::info("http on {} (port {})", listen, http.port());
  return service;
}

}  // namespace bm
