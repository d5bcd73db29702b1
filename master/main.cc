// bm-master: wires the master server to the command line, logging and signals.

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <zmq.hpp>

#include "common/core/allocator.h"
#include "common/core/clock.h"
#include "common/core/logging.h"
#include "common/http/http_server.h"
#include "common/security/node_security.h"
#include "common/server/server_config.h"
#include "common/server/server_startup.h"
#include "common/server/shutdown_signals.h"
#include "common/zookeeper/zookeeper_session.h"
#include "master/leader_election.h"
#include "master/master_server.h"
#include "master/status_routes.h"
#include "master/status_service.h"

namespace {

// The master's view of the ZooKeeper election (master/leadership.h).
class ElectionLeadership final : public bm::Leadership {
 public:
  explicit ElectionLeadership(bm::LeaderElection& election) : election_(election) {}
  bm::LeadershipView Current() const override {
    const bm::ElectionSnapshot now = election_.Current();
    return bm::LeadershipView{.leader = now.role == bm::ElectionRole::kLeader,
                              .epoch = now.epoch,
                              .leader_id = now.leader_id,
                              .leader_address = now.leader_address,
                              .in_sync_published = now.in_sync_published};
  }
  void PublishInSync(std::vector<std::string> standbys) override {
    election_.PublishInSync(std::move(standbys));
  }

 private:
  bm::LeaderElection& election_;
};

// Forwards to the election once it has started.
class DeferredLeadership final : public bm::Leadership {
 public:
  void Set(bm::Leadership* target) { target_.store(target); }
  void PublishInSync(std::vector<std::string> standbys) override {
    if (bm::Leadership* target = target_.load()) target->PublishInSync(std::move(standbys));
  }
  bm::LeadershipView Current() const override {
    const bm::Leadership* target = target_.load();  // NOLINT: read-only use
    return target != nullptr ? target->Current() : bm::LeadershipView{};
  }

 private:
  std::atomic<bm::Leadership*> target_{nullptr};
};

// The address others reach this master at: --advertise, else the bound endpoint (which must
// then not be a wildcard).
std::string AdvertisedAddress(const std::string& advertise, const std::string& endpoint) {
  return advertise.empty() ? endpoint : advertise;
}

// Every flag of bm-master.
struct MasterFlags {
  std::string listen;
  double heartbeat_timeout_s = 10;
  double shuffle_ttl_s = 24 * 3600;
  std::string log_level = "info";
  std::string state_dir;
  std::string http;
  std::string key_file;
  std::string allow_dir;
  bool insecure = false;
  size_t max_connections_per_key = bm::MasterOptions{}.max_connections_per_key;
  size_t max_registrations_per_key = bm::MasterOptions{}.max_registrations_per_key;
  size_t lost_blocks_kept = bm::MasterOptions{}.lost_blocks_kept;
  std::string zookeeper;
  std::string advertise;
  std::string master_id;
  double session_timeout_s = 2;
  double standby_timeout_s = 1;
};

void AddFlags(CLI::App& app, MasterFlags& f);

// The election a master runs in (--zookeeper), wired to its server. The server is created
// first (the election publishes its bound address) and sees, until Start(), a standby that
// knows no leader; the election's changes then wake the server's loop.
class ServerElection {
 public:
  bm::Leadership* leadership() { return &deferred_; }

  bm::Status Start(const MasterFlags& f, bm::MasterServer& server) {
    const std::string address = AdvertisedAddress(f.advertise, server.endpoint());
    BM_ASSIGN_OR_RETURN(
        election_, bm::LeaderElection::Start(
                       bm::ElectionOptions{.zookeeper = f.zookeeper,
                                           .candidate_id = f.master_id,
                                           .address = address,
                                           .session_timeout = std::chrono::milliseconds(
                                               static_cast<int64_t>(f.session_timeout_s * 1000)),
                                           .require_in_sync = true},
                       [this] {
                         std::lock_guard<std::mutex> lock(mutex_);
                         if (server_ != nullptr) server_->Wake();
                       }));
    adapter_ = std::make_unique<ElectionLeadership>(*election_);
    deferred_.Set(adapter_.get());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      server_ = &server;
    }
    server.Wake();
    spdlog::info("candidate {} at {} in the election at {}", f.master_id, address, f.zookeeper);
    return bm::Status::Ok();
  }
  // Before the server goes: the election stops waking it.
  void Detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    server_ = nullptr;
  }
  // Closes the session: this master's znodes go at once (a standby takes over now).
  void Resign() { election_.reset(); }

 private:
  DeferredLeadership deferred_;
  std::unique_ptr<bm::LeaderElection> election_;
  std::unique_ptr<ElectionLeadership> adapter_;
  std::mutex mutex_;  // guards server_ against the election's threads
  bm::MasterServer* server_ = nullptr;
};

void AddFlags(CLI::App& app, MasterFlags& f) {
  app.add_option("--listen", f.listen, "Address to serve on, e.g. tcp://0.0.0.0:7077")->required();
  app.add_option("--heartbeat-timeout", f.heartbeat_timeout_s,
                 "Seconds without a heartbeat before a worker is dropped (fractions allowed)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value) || !(value > 0) || value > 1e9) {
              return "must be a positive number of seconds, got '" + text + "'";
            }
            return "";
          },
          "SECONDS"))
      ->capture_default_str();
  app.add_option("--state-dir", f.state_dir,
                 "Directory of the master's journal (RocksDB; created if missing): workers, "
                 "block locations and RDD descriptions survive a master restart. Default: none");
  app.add_option("--key", f.key_file,
                 "The master's secret certificate (NAME.key_secret from `bmctl keygen NAME "
                 "--role master`): every connection is then CURVE-encrypted and authenticated");
  app.add_option("--allow", f.allow_dir,
                 "Folder of public certificates (*.key) allowed in, each with its role; "
                 "re-read on SIGHUP");
  app.add_flag("--insecure", f.insecure,
               "Serve without keys on a non-loopback address (plaintext, anyone who can reach "
               "the port is trusted)");
  app.add_option("--max-connections-per-key", f.max_connections_per_key,
                 "With keys: connections one key may hold open at once; beyond it the key's "
                 "requests and new handshakes are refused until one closes (0: no limit)")
      ->capture_default_str();
  app.add_option("--max-registrations-per-key", f.max_registrations_per_key,
                 "With keys: worker registrations one key may make within a minute; beyond it "
                 "they are refused with a time to retry (0: no limit)")
      ->capture_default_str();
  app.add_option("--shuffle-ttl", f.shuffle_ttl_s,
                 "Seconds after which a shuffle no client registered, read or committed to is "
                 "removed with its data")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lost-blocks-kept", f.lost_blocks_kept,
                 "Blocks whose last copy was lost that the master remembers (bmctl get says "
                 "\"lost\" and why; bmctl blocks --lost lists them), journaled with --state-dir; "
                 "beyond it the oldest are forgotten first (0: none)")
      ->capture_default_str();
  app.add_option("--http", f.http,
                 "Serve status pages, the REST API (/api/v1), /metrics, /healthz and /readyz on "
                 "HOST:PORT, e.g. 0.0.0.0:8080 (port 0: any free port). Default: off");
  app.add_option("--zookeeper", f.zookeeper,
                 "Run as one of several masters (README \"Standby masters\"): "
                 "HOST:PORT[,HOST:PORT...][/CHROOT] of the ZooKeeper ensemble that elects the "
                 "leader (chroot default /blockmgr). Needs --state-dir. Default: lead alone");
  app.add_option("--advertise", f.advertise,
                 "With --zookeeper: the address clients and workers reach this master at, "
                 "published when it leads (default: the --listen address)");
  app.add_option("--id", f.master_id,
                 "With --zookeeper: this master's name among the masters (default: "
                 "HOSTNAME:PORT)");
  app.add_option("--session-timeout", f.session_timeout_s,
                 "With --zookeeper: the ZooKeeper session timeout in seconds; a killed leader "
                 "is replaced about this long after it died (ZooKeeper bounds it to 2-20 "
                 "ticks)")
      ->capture_default_str();
  app.add_option("--standby-timeout", f.standby_timeout_s,
                 "With --zookeeper: seconds a standby may fetch nothing before the leader stops "
                 "waiting for it to acknowledge changes (it is then out of sync)")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  bm::TuneAllocatorForBlockBuffers();
  CLI::App app{"bm-master: the blockmgr master (block locations and live workers)"};
  MasterFlags f;
  AddFlags(app, f);
  bm::AddConfigFileAndEnvironment(app, "BLOCKMGR_MASTER_");  // after the last flag
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a hint
    return code == 0 ? 0 : 2;
  }

  if (bm::Status s = bm::CheckListenSecurity(f.listen, !f.key_file.empty(), f.insecure); !s.ok()) {
    return bm::StartFailed("bm-master", s, bm::kUsageExit);
  }

  // At start, not every second thereafter: a port past 65535 would wrap to another port
  // (another cluster's ZooKeeper), and a chroot ZooKeeper refuses fails every request.
  if (!f.zookeeper.empty()) {
    if (bm::Status s = bm::ParseZooKeeperAddress(f.zookeeper).status(); !s.ok()) {
      return bm::StartFailed("bm-master", bm::Status(s.code(), "--zookeeper: " + s.message()),
                             bm::kUsageExit);
    }
  }

  bm::ShutdownSignals shutdown_signals;  // before any thread starts
  bm::InitLogging("bm-master", f.log_level);
  zmq::context_t context(1);
  // The master keeps one socket per registered worker; ZeroMQ's default cap is 1023 sockets.
  context.set(zmq::ctxopt::max_sockets, 65536);
  // The ZAP handler binds before the master's socket, so no handshake is ever let through
  // without it (libzmq 4.3 lets any key in when no handler is bound).
  bm::Result<bm::SecureNode> keys = bm::StartServerKeys(context, f.key_file, bm::KeyRole::kMaster,
                                                        f.allow_dir, "", shutdown_signals);
  if (!keys.ok()) return bm::StartFailed("bm-master", keys.status(), bm::kStartExit);
  bm::SecureNode secure = std::move(keys).value();
  bm::SteadyClock clock;
  // HTTP first, so that /healthz answers (and /readyz says "not yet") while a large journal
  // loads.
  bm::HttpServer http_server;
  bm::Result<std::unique_ptr<bm::MasterStatusService>> status =
      bm::StartStatusPages<bm::MasterStatusService>(http_server, f.http, bm::AddMasterStatusRoutes);
  if (!status.ok()) return bm::StartFailed("bm-master", status.status());
  bm::MasterOptions options;
  options.status_hook = status->get();
  options.listen = f.listen;
  options.state_dir = f.state_dir;
  options.keys = secure.keys;
  options.zap = secure.zap.get();
  options.max_connections_per_key = f.max_connections_per_key;
  options.max_registrations_per_key = f.max_registrations_per_key;
  options.lost_blocks_kept = f.lost_blocks_kept;
  options.shuffle_ttl =
      std::chrono::duration_cast<bm::Duration>(std::chrono::duration<double>(f.shuffle_ttl_s));
  options.heartbeat_timeout = std::chrono::duration_cast<bm::Duration>(
      std::chrono::duration<double>(f.heartbeat_timeout_s));
  options.standby_timeout =
      std::chrono::duration_cast<bm::Duration>(std::chrono::duration<double>(f.standby_timeout_s));
  ServerElection election;
  if (!f.zookeeper.empty()) {
    if (f.state_dir.empty()) {
      std::fprintf(stderr, "bm-master: --zookeeper needs --state-dir (the standby's journal)\n");
      return 2;
    }
    if (f.master_id.empty()) {
      char host[256] = {};
      ::gethostname(host, sizeof(host) - 1);
      const std::string& named = f.advertise.empty() ? f.listen : f.advertise;
      f.master_id = std::string(host) + named.substr(named.rfind(':'));
    }
    options.leadership = election.leadership();
    options.master_id = f.master_id;
    options.advertised_address = f.advertise;
  }
  bm::Result<std::unique_ptr<bm::MasterServer>> server =
      bm::MasterServer::Create(context, options, clock);
  if (!server.ok()) {
    return bm::StartFailed("bm-master", server.status(), bm::kStartExit);
  }
  if (!f.zookeeper.empty()) {
    if (bm::Status started = election.Start(f, **server); !started.ok()) {
      std::fprintf(stderr, "bm-master: --zookeeper: %s\n", started.message().c_str());
      return 2;
    }
  }

  spdlog::info("listening on {} (heartbeat timeout {} s, journal {}, {})",
               server.value()->endpoint(), f.heartbeat_timeout_s,
               f.state_dir.empty() ? std::string("none") : f.state_dir,
               secure.keys.enabled() ? "CURVE keys on" : "no keys: plaintext");

  shutdown_signals.CallOnSignal([&] { server.value()->Stop(); });
  server.value()->Run();  // returns after Stop(), or when this master lost the lead
  const bool demoted = server.value()->demoted();
  shutdown_signals.StopWaiting();
  election.Detach();
  http_server.Stop();  // before the loop's state goes: handlers may be waiting on it
  server.value().reset();
  secure.zap.reset();  // after the sockets it authenticates, before the context
  if (demoted) {
    // A deposed leader's state is out of date in ways nothing tracks: it starts over, as a
    // standby, with the same command line (same pid, so supervisors see no exit). The
    // election's session closes first, so its candidate znode goes at once.
    election.Resign();
    spdlog::warn("restarting as a standby");
    spdlog::shutdown();
    ::execv("/proc/self/exe", argv);
    std::fprintf(stderr, "bm-master: cannot restart itself: %s\n", std::strerror(errno));
    return 1;
  }
  election.Resign();  // a standby takes over at once
  spdlog::info("stopped");
  return 0;
}
