// bm-worker: wires the worker's stores and server to the command line, logging and signals.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/core/allocator.h"
#include "common/core/byte_size.h"
#include "common/core/clock.h"
#include "common/core/logging.h"
#include "common/http/http_server.h"
#include "common/net/master_addresses.h"
#include "common/security/node_security.h"
#include "common/server/server_config.h"
#include "common/server/server_startup.h"
#include "common/server/shutdown_signals.h"
#include "common/zookeeper/leader_directory.h"
#include "common/zookeeper/zookeeper_session.h"
#include "worker/address.h"
#include "worker/block_manager.h"
#include "worker/disk/disk_directory.h"
#include "worker/disk/disk_store.h"
#include "worker/disk/unopened_disk.h"
#include "worker/disk_set.h"
#include "worker/memory_store.h"
#include "worker/worker_server.h"

namespace {

constexpr int kUsageError = bm::kUsageExit;
constexpr int kStartError = bm::kStartExit;

int Usage(const std::string& message) {
  std::fprintf(stderr, "bm-worker: %s\n", message.c_str());
  return kUsageError;
}

// The command line, with its defaults.
struct Flags {
  std::string master;
  std::string zookeeper;
  std::string listen;
  std::string memory_text;
  std::vector<std::string> disk_dirs;
  double disk_check_interval_seconds = 5;
  double disk_check_timeout_seconds = 10;
  int failed_disks_tolerated = -1;
  std::string disk_limit_text = "0";
  std::string spill_backlog_text = "0";
  std::string shuffle_memory_text = "256MiB";
  std::string shuffle_split_text = "256MiB";
  std::string chunk_file_min_text = "64KiB";
  std::string id;
  std::string advertise;
  std::string host_label;
  std::string rack_label;
  std::string log_level = "info";
  std::string http;
  double scrub_rate_mb = 4;
  std::string key_file;
  std::string master_key_file;
  std::string allow_dir;
  bool insecure = false;
  size_t max_connections_per_key = bm::WorkerServerOptions{}.max_connections_per_key;
  size_t max_uploads_per_key = bm::WorkerServerOptions{}.max_uploads_per_key;
  int io_threads = 1;
  bool enable_fault_injection = false;
  std::string read_ahead_text = "0";
  bool no_local_reads = false;
  std::string local_socket;
  int pin_lifetime_seconds = 600;
  uint64_t local_arena_mb = 64;
  // The default: bench workload 14 (recompute) measured cost-aware eviction's total recompute
  // time well under LRU's on skewed costs (bench/README.md).
  std::string eviction = "cost";
};

// --failed-disks-tolerated as given; nullopt for -1 (the default: all disks but one).
std::optional<size_t> FailedDisksToleratedFlag(const Flags& f) {
  if (f.failed_disks_tolerated < 0) return std::nullopt;
  return static_cast<size_t>(f.failed_disks_tolerated);
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--master", f.master,
                 "The master's address, e.g. tcp://10.0.0.1:7077, or every master's, separated "
                 "by commas, with standby masters (README \"Standby masters\"); or give "
                 "--zookeeper");
  app.add_option("--zookeeper", f.zookeeper,
                 "HOST:PORT[,HOST:PORT...][/CHROOT] of the ZooKeeper the masters are elected "
                 "through: the worker registers with the leader it names, and follows it");
  app.add_option("--listen", f.listen, "Address to serve on, e.g. tcp://0.0.0.0:7078")->required();
  app.add_option("--memory", f.memory_text, "Memory for blocks, e.g. 512MiB or 4GiB")->required();
  app.add_option("--disk-dir", f.disk_dirs,
                 "Directory of a disk store (RocksDB), as DIR or DIR:LIMIT (e.g. /data1:200GiB); "
                 "give it once per disk. New blocks go to the disk with the most free space "
                 "relative to its limit. The worker's own files (LEADER_EPOCH, local.sock) live "
                 "in the first")
      ->required();
  app.add_option("--disk-limit", f.disk_limit_text,
                 "Disk space for blocks on each --disk-dir that gives no LIMIT of its own; 0 = as "
                 "much as the filesystem has free (less a headroom for RocksDB's own files)")
      ->capture_default_str();
  app.add_option("--disk-check-interval", f.disk_check_interval_seconds,
                 "Seconds between checks of each disk (a small file written, fsynced and read "
                 "back in its directory); a disk whose check fails with an I/O error is failed")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--disk-check-timeout", f.disk_check_timeout_seconds,
                 "Seconds a disk check, or any read or write on a disk, may take before the disk "
                 "counts as hung and is failed")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--failed-disks-tolerated", f.failed_disks_tolerated,
                 "Failed disks the worker keeps serving with (their blocks reported lost); it "
                 "stops (exit 3) when more fail. -1 = keep serving while one disk works")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  app.add_option("--disk-chunk-file-min", f.chunk_file_min_text,
                 "Disk blocks of at least this size keep their bytes in a file of their own "
                 "beside RocksDB, out of its write-ahead log; \"off\": every block in RocksDB")
      ->capture_default_str();
  app.add_option("--spill-backlog", f.spill_backlog_text,
                 "How far evicted blocks waiting to be spilled may run the RAM held past "
                 "--memory before new put bytes wait for the disk; 0 = a quarter of --memory, "
                 "at least 64MiB")
      ->capture_default_str();
  app.add_option("--shuffle-memory", f.shuffle_memory_text,
                 "Memory for the shuffle partitions this worker holds (besides --memory); a "
                 "push past it waits for room")
      ->capture_default_str();
  app.add_option("--shuffle-split-size", f.shuffle_split_text,
                 "A shuffle partition's stream on this worker takes no more pieces past this "
                 "size; the partition continues on another worker")
      ->capture_default_str();
  app.add_option("--id", f.id, "Worker id (default: worker-HOST-PORT of the advertised address)");
  app.add_option("--advertise", f.advertise,
                 "Address clients use to reach this worker (default: the listen address; "
                 "required when listening on a wildcard host)");
  app.add_option("--host", f.host_label,
                 "Placement label: the machine this worker runs on (replicas go to distinct "
                 "hosts); default none");
  app.add_option("--rack", f.rack_label,
                 "Placement label: the rack this worker is in (replicas go to distinct racks "
                 "first); default none");
  app.add_option("--key", f.key_file,
                 "This worker's secret certificate (NAME.key_secret from `bmctl keygen NAME "
                 "--role worker`; NAME is the worker id)");
  app.add_option("--master-key", f.master_key_file,
                 "The master's public certificate (MASTER.key): the only key this worker takes "
                 "removals, copies, decommission and shutdown from");
  app.add_option("--allow", f.allow_dir,
                 "Folder of public certificates (*.key) allowed in (clients, other workers); "
                 "re-read on SIGHUP");
  app.add_flag("--insecure", f.insecure,
               "Serve without keys on a non-loopback address (plaintext, anyone who can reach "
               "the port is trusted)");
  app.add_option("--max-connections-per-key", f.max_connections_per_key,
                 "With keys: connections one key may hold open at once; beyond it the key's "
                 "requests and new handshakes are refused until one closes (0: no limit)")
      ->capture_default_str();
  app.add_option("--max-uploads-per-key", f.max_uploads_per_key,
                 "With keys: puts one key may have in progress at once; more are refused as "
                 "unavailable (retry later)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--io-threads", f.io_threads,
                 "ZeroMQ I/O threads; with keys each one seals and opens the frames of the "
                 "connections it serves, so more let many clients use more cores")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--http", f.http,
                 "Serve /metrics, /healthz and /readyz on HOST:PORT, e.g. 0.0.0.0:9100 (port 0: "
                 "any free port). Default: off");
  app.add_option("--scrub-rate", f.scrub_rate_mb,
                 "MB/s at which the disk blocks are re-read and verified in the background, so a "
                 "copy that rots is found and repaired before it is needed (0: off)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_flag("--enable-fault-injection", f.enable_fault_injection,
               "Test-only: serve corruptBlock, which flips a stored byte of a block on purpose "
               "so tests can watch corruption being found and repaired (admin keys only with "
               "keys on). Never set it on a worker whose data matters");
  // Off by default: on two cores, 64 MiB disk gets measured slower with it (bench workload 4,
  // rows 4 against 4b), as the read ahead competes for the cores the send needs.
  app.add_option("--read-ahead", f.read_ahead_text,
                 "Bytes of disk block ranges read ahead of the client's request for them, at "
                 "most (a client reading a large block range by range finds the next one read; "
                 "0: off, the default; try 64MiB where cores are to spare)")
      ->capture_default_str();
  app.add_flag("--no-local-reads", f.no_local_reads,
               "Serve every read over TCP: no Unix socket through which clients on this host "
               "map blocks (README \"Same-host reads\")");
  app.add_option("--local-socket", f.local_socket,
                 "The Unix socket of same-host reads (default: local.sock in --disk-dir)");
  app.add_option("--pin-lifetime", f.pin_lifetime_seconds,
                 "Seconds a block mapped by a reader on this host stays pinned (never evicted, "
                 "counted in --memory) when the reader does not release it")
      ->check(CLI::Range(1, 86400 * 7))
      ->capture_default_str();
  app.add_option("--local-arena-mb", f.local_arena_mb,
                 "MiB of each small-block arena: copies of blocks up to 64 KiB that readers on "
                 "this host find without asking the worker (one arena per tenant with such "
                 "readers, at most 16; outside --memory); 0: none")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--eviction", f.eviction,
                 "Which memory blocks go first when room is needed: cost (GreedyDual-Size-"
                 "Frequency: cheap to recompute per byte, rarely read, and spillable blocks "
                 "first) or lru (least recently used first). README \"Eviction\"")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  bm::AddConfigFileAndEnvironment(app, "BLOCKMGR_WORKER_");  // after the last flag
}

// What the flags say, checked; the memory and disk sizes parsed.
struct Sizes {
  uint64_t memory = 0;
  uint64_t disk_limit = 0;
  std::vector<bm::DiskDirSpec> disks;  // each with its limit (--disk-limit when it gives none)
  uint64_t spill_backlog = 0;
  uint64_t read_ahead = 0;
  uint64_t chunk_file_min = 0;
  bm::EvictionMode eviction = bm::EvictionMode::kCost;
  uint64_t shuffle_memory = 0;
  uint64_t shuffle_split = 0;
};

// kInvalidArgument (the usage error to print) when a flag is wrong.
bm::Result<Sizes> CheckFlags(const Flags& f) {
  bm::Result<uint64_t> memory = bm::ParseByteSize(f.memory_text);
  if (!memory.ok()) return bm::InvalidArgumentError("--memory: " + memory.status().message());
  bm::Result<uint64_t> disk_limit = bm::ParseByteSize(f.disk_limit_text);
  if (!disk_limit.ok()) {
    return bm::InvalidArgumentError("--disk-limit: " + disk_limit.status().message());
  }
  bm::Result<uint64_t> spill_backlog = bm::ParseByteSize(f.spill_backlog_text);
  if (!spill_backlog.ok()) {
    return bm::InvalidArgumentError("--spill-backlog: " + spill_backlog.status().message());
  }
  bm::Result<uint64_t> shuffle_memory = bm::ParseByteSize(f.shuffle_memory_text);
  if (!shuffle_memory.ok()) {
    return bm::InvalidArgumentError("--shuffle-memory: " + shuffle_memory.status().message());
  }
  bm::Result<uint64_t> shuffle_split = bm::ParseByteSize(f.shuffle_split_text);
  if (!shuffle_split.ok() || *shuffle_split == 0) {
    return bm::InvalidArgumentError("--shuffle-split-size: " +
                                    (shuffle_split.ok() ? std::string("must be more than 0")
                                                        : shuffle_split.status().message()));
  }
  bm::Result<uint64_t> read_ahead = bm::ParseByteSize(f.read_ahead_text);
  if (!read_ahead.ok()) {
    return bm::InvalidArgumentError("--read-ahead: " + read_ahead.status().message());
  }
  uint64_t chunk_file_min = UINT64_MAX;
  if (f.chunk_file_min_text != "off") {
    bm::Result<uint64_t> parsed = bm::ParseByteSize(f.chunk_file_min_text);
    if (!parsed.ok()) {
      return bm::InvalidArgumentError("--disk-chunk-file-min: " + parsed.status().message() +
                                      " (or \"off\")");
    }
    chunk_file_min = std::max<uint64_t>(*parsed, 1);
  }
  bm::Result<bm::EvictionMode> eviction = bm::ParseEvictionMode(f.eviction);
  if (!eviction.ok()) return bm::InvalidArgumentError("--eviction: " + eviction.status().message());
  // One master, or several (standby masters) separated by commas, or ZooKeeper, or both.
  if (f.master.empty() && f.zookeeper.empty()) {
    return bm::InvalidArgumentError("--master or --zookeeper is required");
  }
  if (!f.master.empty()) {
    bm::Result<bm::MasterAddresses> masters = bm::MasterAddresses::Parse(f.master);
    if (!masters.ok()) return bm::InvalidArgumentError("--master: " + masters.status().message());
    for (const std::string& master : masters->all()) {
      if (bm::Status s = bm::ParseTcpAddress(master, false).status(); !s.ok()) {
        return bm::InvalidArgumentError("--master: " + s.message());
      }
    }
  }
  if (!f.zookeeper.empty()) {
    if (bm::Status s = bm::ParseZooKeeperAddress(f.zookeeper).status(); !s.ok()) {
      return bm::InvalidArgumentError("--zookeeper: " + s.message());
    }
  }
  bm::Result<bm::TcpAddress> listen_address = bm::ParseTcpAddress(f.listen, true);
  if (!listen_address.ok()) {
    return bm::InvalidArgumentError("--listen: " + listen_address.status().message());
  }
  if (!f.advertise.empty()) {
    bm::Result<bm::TcpAddress> advertised = bm::ParseTcpAddress(f.advertise, false);
    if (!advertised.ok()) {
      return bm::InvalidArgumentError("--advertise: " + advertised.status().message());
    }
    if (bm::IsWildcardHost(advertised->host)) {
      return bm::InvalidArgumentError("--advertise " + f.advertise +
                                      " is a wildcard; give an address clients can "
                                      "connect to");
    }
  } else if (bm::IsWildcardHost(listen_address->host)) {
    return bm::InvalidArgumentError("--listen " + f.listen +
                                    " binds every interface; say which address clients "
                                    "should use with --advertise tcp://HOST:PORT");
  }
  std::vector<bm::DiskDirSpec> disks;
  for (const std::string& text : f.disk_dirs) {
    bm::Result<bm::DiskDirSpec> disk = bm::ParseDiskDir(text);
    if (!disk.ok()) return disk.status();
    if (disk->limit == 0) disk->limit = *disk_limit;
    disks.push_back(std::move(disk).value());
  }
  if (disks.empty()) return bm::InvalidArgumentError("--disk-dir must not be empty");
  // By what each directory is, not how it is spelt ("D", "D/", a symlink to D).
  std::vector<std::string> disk_paths;
  for (const bm::DiskDirSpec& disk : disks) disk_paths.push_back(disk.path);
  if (bm::Status distinct = bm::CheckDistinctDirectories(disk_paths); !distinct.ok()) {
    return distinct;
  }
  if (f.disk_check_timeout_seconds < f.disk_check_interval_seconds / 100) {
    return bm::InvalidArgumentError("--disk-check-timeout is too short for the interval");
  }
  if (bm::Status s = bm::CheckListenSecurity(f.listen, !f.key_file.empty(), f.insecure); !s.ok()) {
    return bm::InvalidArgumentError(s.message());
  }
  if (f.key_file.empty() != f.master_key_file.empty()) {
    return bm::InvalidArgumentError("--key and --master-key go together");
  }

  return Sizes{*memory,        *disk_limit, std::move(disks), *spill_backlog, *read_ahead,
               chunk_file_min, *eviction,   *shuffle_memory,  *shuffle_split};
}

// How long the worker's ZooKeeper session outlives a silence: a reader's session, so its
// length only bounds how soon a lost one is replaced.
constexpr std::chrono::seconds kLeaderDirectorySession{10};

// The address of the leader ZooKeeper names, once it names one; empty if `stopping` came first.
std::string AwaitLeader(const bm::LeaderDirectory& directory, const std::string& zookeeper,
                        const std::atomic<bool>& stopping) {
  spdlog::info("waiting for ZooKeeper {} to name a leader", zookeeper);
  while (!stopping.load()) {
    if (std::optional<bm::LeaderRecord> leader =
            directory.WaitForLeader(0, std::chrono::milliseconds(200))) {
      return leader->address;
    }
  }
  return "";
}

// Runs the worker until a signal or the master's shutdown; the exit code.
int Run(const Flags& f, const Sizes& sizes) {
  bm::ShutdownSignals shutdown_signals;  // before any thread starts
  bm::InitLogging("bm-worker", f.log_level);
  // A signal stops the wait for a leader below, or the server once it runs.
  std::atomic<bool> stopping{false};
  std::atomic<bm::WorkerServer*> running{nullptr};
  shutdown_signals.CallOnSignal([&] {
    stopping = true;
    if (bm::WorkerServer* server = running.load()) server->Stop();
  });

  // With --zookeeper the leader is whoever ZooKeeper names; without --master the worker waits
  // for it to name one before it starts.
  std::shared_ptr<bm::LeaderDirectory> directory;
  std::string masters = f.master;
  if (!f.zookeeper.empty()) {
    bm::Result<std::unique_ptr<bm::LeaderDirectory>> started =
        bm::LeaderDirectory::Start(f.zookeeper, kLeaderDirectorySession);
    if (!started.ok()) {
      std::fprintf(stderr, "bm-worker: --zookeeper: %s\n", started.status().message().c_str());
      return kUsageError;
    }
    directory = std::move(started).value();
    if (masters.empty()) masters = AwaitLeader(*directory, f.zookeeper, stopping);
    if (masters.empty()) return 0;  // stopped while waiting
  }

  // A disk that cannot be opened is failed from the start and the worker serves from the
  // others, as HDFS starts without a bad volume, within --failed-disks-tolerated (by default
  // while one disk opens); past that it does not start, naming each bad disk, so the operator
  // replaces them (an empty directory will do).
  std::vector<bm::DiskSlot> disks;
  std::string disk_summary;
  std::vector<std::string> unopened;
  std::vector<std::string> shuffle_dirs;  // the disks that opened keep shuffle partitions too
  for (const bm::DiskDirSpec& spec : sizes.disks) {
    bm::DiskStoreOptions disk_options;
    disk_options.limit_bytes = spec.limit;
    disk_options.chunk_file_min_bytes = sizes.chunk_file_min;
    bm::Result<std::unique_ptr<bm::DiskStore>> disk =
        bm::DiskStore::Open(spec.path, std::move(disk_options));
    if (!disk.ok() && disk.status().code() == bm::StatusCode::kUnavailable) {
      // Held by another store (a second worker on it): not a failed disk, a mistake to fix.
      std::fprintf(stderr, "bm-worker: --disk-dir %s: %s\n", spec.path.c_str(),
                   disk.status().message().c_str());
      return kStartError;
    }
    if (!disk.ok()) {
      const std::string why = disk.status().message();
      unopened.push_back("cannot open disk store in " + spec.path + ": " + why);
      disks.push_back(
          bm::DiskSlot{spec.path, std::make_unique<bm::UnopenedDisk>(why), spec.limit, why});
      continue;
    }
    // Without a limit the filesystem's free space is the limit, less the headroom.
    disk_summary += (disk_summary.empty() ? "" : ", ") + spec.path + " (limit " +
                    (spec.limit == 0 ? std::string("the filesystem's free space")
                                     : bm::FormatBytes(spec.limit)) +
                    ", " + bm::FormatBytes((*disk)->headroom()) +
                    " of the filesystem kept free for the store's own files)";
    disks.push_back(bm::DiskSlot{spec.path, std::move(disk).value(), spec.limit});
    shuffle_dirs.push_back(spec.path);
  }
  // At least one disk must open, whatever the flag allows later.
  const size_t tolerated_at_start = std::min(
      bm::FailedDisksTolerated(FailedDisksToleratedFlag(f), disks.size()), disks.size() - 1);
  if (unopened.size() > tolerated_at_start) {
    for (const std::string& why : unopened) std::fprintf(stderr, "bm-worker: %s\n", why.c_str());
    std::fprintf(stderr,
                 "bm-worker: %zu of %zu disks could not be opened, more than the %zu tolerated "
                 "(--failed-disks-tolerated)\n",
                 unopened.size(), disks.size(), tolerated_at_start);
    return kStartError;
  }
  // Starts the storage threads, one per disk, which own the disk stores from here on.
  auto blocks = std::make_unique<bm::BlockManager>(
      std::make_unique<bm::MemoryStore>(sizes.memory, bm::MakeEvictionPolicy(sizes.eviction)),
      std::move(disks),
      bm::BlockManagerOptions{
          .spill_backlog_bytes = sizes.spill_backlog,
          .scrub_bytes_per_second = static_cast<uint64_t>(f.scrub_rate_mb * 1e6),
          .read_ahead_bytes = sizes.read_ahead,
          .disk_check_interval =
              std::chrono::milliseconds(static_cast<int64_t>(f.disk_check_interval_seconds * 1000)),
          .disk_check_timeout = std::chrono::milliseconds(
              static_cast<int64_t>(f.disk_check_timeout_seconds * 1000))});

  // With keys, each connection's frames are sealed and opened on the I/O thread serving it
  // (bench/notes, "Workload 9: what bounds CURVE"): one thread caps all clients together at one
  // core's cipher rate; more spread the connections over cores.
  zmq::context_t context(f.io_threads);
  // The ZAP handler binds before the worker's socket (see bm-master).
  bm::Result<bm::SecureNode> keys = bm::StartServerKeys(
      context, f.key_file, bm::KeyRole::kWorker, f.allow_dir, f.master_key_file, shutdown_signals);
  if (!keys.ok()) return bm::StartFailed("bm-worker", keys.status(), kStartError);
  bm::SecureNode secure = std::move(keys).value();
  bm::SteadyClock clock;
  bm::HttpServer http_server;
  bm::Result<std::unique_ptr<bm::WorkerStatusService>> status =
      bm::StartStatusPages<bm::WorkerStatusService>(http_server, f.http, bm::AddWorkerStatusRoutes);
  if (!status.ok()) return bm::StartFailed("bm-worker", status.status());
  bm::WorkerServerOptions options;
  options.key_file = f.key_file;
  options.zap = secure.zap.get();
  options.max_connections_per_key = f.max_connections_per_key;
  options.max_uploads_per_key = f.max_uploads_per_key;
  options.master_key_file = f.master_key_file;
  options.status_hook = status->get();
  options.enable_fault_injection = f.enable_fault_injection;
  options.listen_address = f.listen;
  options.advertise_address = f.advertise;
  options.worker_id = f.id;
  options.shuffle_memory = sizes.shuffle_memory;
  options.shuffle_split_size = sizes.shuffle_split;
  options.shuffle_dirs = shuffle_dirs;
  // The worker's own files live in the first disk's directory, as they did with one disk.
  const std::string& first_disk = sizes.disks.front().path;
  options.epoch_file = (std::filesystem::path(first_disk) / "LEADER_EPOCH").string();
  if (!f.no_local_reads) {
    options.local_socket_path = f.local_socket.empty()
                                    ? (std::filesystem::path(first_disk) / "local.sock").string()
                                    : f.local_socket;
  }
  // Maintenance runs the disk checks: at least as often as they are due.
  options.storage_maintenance_interval = std::min<bm::Duration>(
      options.storage_maintenance_interval,
      std::chrono::milliseconds(static_cast<int64_t>(f.disk_check_interval_seconds * 1000)));
  options.failed_disks_tolerated = FailedDisksToleratedFlag(f);
  options.local_pin_lifetime = std::chrono::seconds(f.pin_lifetime_seconds);
  options.local_arena_bytes = f.local_arena_mb << 20;
  options.master.master_address = masters;
  if (directory) {
    options.master.zookeeper_leader = [directory]() -> std::optional<std::string> {
      std::optional<bm::LeaderRecord> leader = directory->Current();
      if (!leader) return std::nullopt;
      return leader->address;
    };
  }
  options.master.host = f.host_label;
  options.master.rack = f.rack_label;
  bm::Result<std::unique_ptr<bm::WorkerServer>> created =
      bm::WorkerServer::Create(context, options, std::move(blocks), clock);
  if (!created.ok()) {
    return bm::StartFailed("bm-worker", created.status(), kStartError);
  }
  std::unique_ptr<bm::WorkerServer> server = std::move(created).value();
  spdlog::info("worker {} listening on {}, memory {} (eviction: {}), disk {}, {}",
               server->worker_id(), server->endpoint(), bm::FormatBytes(sizes.memory), f.eviction,
               disk_summary, secure.keys.enabled() ? "CURVE keys on" : "no keys: plaintext");

  if (f.enable_fault_injection) {
    spdlog::warn(
        "fault injection is on (--enable-fault-injection): corruptBlock requests may "
        "corrupt stored blocks on purpose; for tests only");
  }

  running = server.get();
  if (!stopping.load()) server->Run();  // returns after Stop(), or if the loop fails
  shutdown_signals.StopWaiting();
  running = nullptr;
  http_server.Stop();  // before the loop's state goes: handlers may be waiting on it
  const int exit_code = server->exit_code();
  server.reset();  // closes the sockets and the disk store (RocksDB) before the context goes
  secure.zap.reset();
  spdlog::info("stopped");
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  bm::RestartWithHugePageHeaps(argv);
  bm::TuneAllocatorForBlockBuffers();
  CLI::App app{"bm-worker: a blockmgr worker (stores blocks in memory and on disk)"};
  Flags flags;
  AddFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error and a hint
    return code == 0 ? 0 : kUsageError;
  }
  bm::Result<Sizes> sizes = CheckFlags(flags);
  if (!sizes.ok()) return Usage(sizes.status().message());
  return Run(flags, *sizes);
}
