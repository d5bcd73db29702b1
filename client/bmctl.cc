// bmctl: the operator's command line for a blockmgr cluster, built on bm::Client.
// Exit codes: 0 success; 1 operational failure (one line on stderr); 2 usage error.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/bmctl_args.h"
#include "client/bmctl_output.h"
#include "client/client.h"
#include "client/progress_line.h"
#include "common/allocator.h"
#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/storage_level.h"

namespace bm {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

std::string ErrnoText() { return std::strerror(errno); }

int Fail(const Status& status) {
  std::cerr << "bmctl: " << status.ToString() << "\n";
  return kExitFailure;
}

int UsageError(const std::string& message) {
  std::cerr << "bmctl: " << message << " (see bmctl --help)\n";
  return kExitUsage;
}

// Writes everything to `fd`, retrying short writes.
Status WriteAll(int fd, std::span<const std::byte> bytes, const std::string& what) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("writing " + what + " failed: " + ErrnoText());
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// Reads everything from `fd` (stdin, a pipe, a FIFO, a device: nothing with a size to announce
// up front, so it is buffered whole).
Result<std::vector<std::byte>> ReadAll(int fd, const std::string& what) {
  std::vector<std::byte> data;
  std::vector<std::byte> buffer(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("cannot read " + what + ": " + ErrnoText());
    if (n == 0) return data;
    data.insert(data.end(), buffer.begin(), buffer.begin() + n);
  }
}

// Closes the descriptor it holds when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The input of `put`, checked before anything is sent: a directory, a file that cannot be
// opened and one whose first byte cannot be read (a device, /proc/self/mem) are refused with
// the reason, instead of failing mid-upload or storing an empty block.
struct PutInput {
  std::unique_ptr<FileDescriptor> fd;
  bool regular = false;  // a regular file: its size is known and it is streamed
  uint64_t size = 0;     // of a regular file
};

Result<PutInput> OpenPutInput(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return NotFoundError("cannot open " + path + ": " + ErrnoText());
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError(path + " is a directory, not a file");
  PutInput input;
  input.fd = std::make_unique<FileDescriptor>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (input.fd->get() < 0) return InternalError("cannot open " + path + ": " + ErrnoText());
  input.regular = S_ISREG(st.st_mode);
  if (input.regular) {
    input.size = static_cast<uint64_t>(st.st_size);
    // A file that will not give its first byte now would fail mid-upload (or, announcing
    // size 0 as /proc files do, be stored empty).
    std::byte probe;
    ssize_t n;
    do {
      n = ::pread(input.fd->get(), &probe, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return InternalError("cannot read " + path + ": " + ErrnoText());
  }
  return input;
}

// Writes the block to `path` through a temporary file in the same directory, renamed into
// place only once every byte arrived, so a failed get leaves no partial file.
Result<uint64_t> GetToFile(Client& client, const BlockId& id, const std::string& path,
                           ProgressLine* progress) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string temp = (dir / ("." + target.filename().string() + ".bmctl-XXXXXX")).string();
  int fd = ::mkstemp(temp.data());
  if (fd < 0) return InternalError("cannot create a file in " + dir.string() + ": " + ErrnoText());
  const mode_t umask_bits = ::umask(0);
  ::umask(umask_bits);
  ::fchmod(fd, 0666 & ~umask_bits);  // as a plainly created file would be, not mkstemp's 0600
  Result<uint64_t> got = client.GetTo(id, [&](std::span<const std::byte> bytes) {
    if (progress) progress->Advance(bytes.size());
    return WriteAll(fd, bytes, path);
  });
  Status finished = got.ok() ? Status::Ok() : got.status();
  if (finished.ok() && ::fsync(fd) != 0) {
    finished = InternalError("writing " + path + " failed: " + ErrnoText());
  }
  if (::close(fd) != 0 && finished.ok()) {
    finished = InternalError("writing " + path + " failed: " + ErrnoText());
  }
  if (finished.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    finished = InternalError("cannot rename the download to " + path + ": " + ErrnoText());
  }
  if (!finished.ok()) {
    ::unlink(temp.c_str());
    return finished;
  }
  return got;
}

// Writes block `id` to `output` (a file, created once complete) or to stdout, reporting the
// bytes to `progress` if given.
Status GetBlock(Client& client, const BlockId& id, const std::string& output,
                ProgressLine* progress) {
  if (!output.empty()) {
    Result<uint64_t> got = GetToFile(client, id, output, progress);
    return got.ok() ? Status::Ok() : got.status();
  }
  // Bytes reach stdout as they arrive; a read failing midway leaves a prefix there (the exit
  // code says so).
  Result<uint64_t> got = client.GetTo(id, [progress](std::span<const std::byte> bytes) {
    if (progress) progress->Advance(bytes.size());
    return WriteAll(STDOUT_FILENO, bytes, "stdout");
  });
  return got.ok() ? Status::Ok() : got.status();
}

// `bmctl workers --watch`: the worker list redrawn every second (JSON documents one after
// another with --json) until interrupted.
int WatchWorkers(Client& client, bool json) {
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  while (true) {
    Result<std::vector<WorkerInfo>> list = client.Workers();
    std::string text;
    if (json) {
      text = list.ok() ? WorkersToJson(*list).dump() + "\n"
                       : nlohmann::json{{"error", list.status().ToString()}}.dump() + "\n";
    } else {
      const std::time_t now = std::time(nullptr);
      char when[32];
      std::strftime(when, sizeof(when), "%H:%M:%S", std::localtime(&now));
      text = std::string("Every 1 s: bmctl workers  (") + when + ")\n\n" +
             (list.ok() ? WorkersTable(*list) : "bmctl: " + list.status().ToString() + "\n");
      // Home the cursor and clear the screen, as watch(1) does.
      if (terminal) text = "\x1b[H\x1b[2J" + text;
    }
    std::cout << text;
    std::cout.flush();
    if (!std::cout) return Fail(InternalError("writing to stdout failed"));
    // A display refresh, not a wait for some condition.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Starts the drain, then follows it until the master no longer lists the worker.
int RunDecommission(Client& client, const std::string& worker, std::chrono::seconds wait,
                    bool json) {
  if (Status started = client.Decommission(worker); !started.ok()) return Fail(started);
  if (!json) std::cerr << "decommissioning " << worker << "\n";
  const auto deadline = std::chrono::steady_clock::now() + wait;
  uint64_t last_blocks = UINT64_MAX;
  while (true) {
    Result<std::vector<WorkerInfo>> workers = client.Workers();
    if (!workers.ok()) return Fail(workers.status());
    auto it = std::find_if(workers->begin(), workers->end(),
                           [&](const WorkerInfo& w) { return w.id == worker; });
    if (it == workers->end()) break;
    if (!json && it->block_count != last_blocks) {
      std::cerr << "  " << worker << " still holds " << it->block_count << " blocks\n";
      last_blocks = it->block_count;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Fail(UnavailableError("worker " + worker + " is still draining after " +
                                   std::to_string(wait.count()) + " s; the drain goes on"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling a remote state
  }
  if (json) {
    std::cout << nlohmann::json{{"decommissioned", worker}}.dump(2) << "\n";
  } else {
    std::cout << "decommissioned " << worker << "\n";
  }
  return 0;
}

struct PutArgs {
  std::string block;
  std::string file;
  std::string level = "MEMORY_AND_DISK";
  std::string worker;
  uint32_t replication = 0;  // 0: as the level says
};

// The progress line of a transfer of `total` bytes on stderr, when it should be shown.
std::unique_ptr<ProgressLine> MaybeProgress(ProgressMode mode, const std::string& label,
                                            uint64_t total, const Clock& clock) {
  if (!ShouldShowProgress(mode, total, ::isatty(STDERR_FILENO) == 1)) return nullptr;
  return std::make_unique<ProgressLine>(std::cerr, label, total, clock);
}

int RunPut(Client& client, const PutArgs& args, const BlockId& id, StorageLevel level, bool json,
           ProgressMode progress_mode) {
  SteadyClock clock;
  PutOptions options;
  if (!args.worker.empty()) options.worker_id = args.worker;
  options.replication = args.replication;
  Result<PutResult> put = [&]() -> Result<PutResult> {
    std::vector<std::byte> data;
    if (args.file == "-") {
      BM_ASSIGN_OR_RETURN(data, ReadAll(STDIN_FILENO, "stdin"));
      return client.Put(id, data, level, options);
    }
    BM_ASSIGN_OR_RETURN(PutInput input, OpenPutInput(args.file));
    if (input.regular) {
      std::ifstream in(args.file, std::ios::binary);
      if (!in) return InternalError("cannot open " + args.file + ": " + ErrnoText());
      std::unique_ptr<ProgressLine> progress =
          MaybeProgress(progress_mode, "put " + id.ToString(), input.size, clock);
      if (!progress) return client.PutStream(id, in, input.size, level, options);
      ProgressStreamBuf counted_buffer(*in.rdbuf(), *progress);
      std::istream counted(&counted_buffer);
      Result<PutResult> put = client.PutStream(id, counted, input.size, level, options);
      progress->Finish();
      return put;
    }
    BM_ASSIGN_OR_RETURN(data, ReadAll(input.fd->get(), args.file));
    return client.Put(id, data, level, options);
  }();
  if (!put.ok()) return Fail(put.status());
  if (put->replicas.size() < put->copies_wanted) {
    std::cerr << "bmctl: warning: only " << put->replicas.size() << " of " << put->copies_wanted
              << " copies stored: not enough workers could take the block\n";
  }
  if (json) {
    std::cout << PutToJson(id, *put).dump(2) << "\n";
  } else {
    std::cout << PutText(id, *put);
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"Put, get, locate and remove blocks in a blockmgr cluster.", "bmctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the command
  app.footer(
      "Exit codes: 0 success, 1 operational failure (not found, master unreachable, out of "
      "space), 2 usage error.");

  std::string master;
  bool json = false;
  std::string timeout = "5";
  // Required by every command but keygen (checked after parsing).
  app.add_option("--master", master,
                 "the master's address, tcp://HOST:PORT (default: $BLOCKMGR_MASTER)")
      ->envname("BLOCKMGR_MASTER");
  bool progress_on = false;
  bool progress_off = false;
  app.add_flag("--progress", progress_on,
               "show a progress line on stderr for put and get (default: for transfers of 64 MiB "
               "or more when stderr is a terminal)");
  app.add_flag("--no-progress", progress_off, "never show a progress line");
  std::string key_file;
  std::string master_key_file;
  app.add_option("--key", key_file,
                 "this user's secret certificate (NAME.key_secret) for a cluster with keys")
      ->envname("BLOCKMGR_KEY");
  app.add_option("--master-key", master_key_file, "the master's public certificate (MASTER.key)")
      ->envname("BLOCKMGR_MASTER_KEY");
  app.add_flag("--json", json, "print JSON for scripts instead of tables");
  app.add_option("--timeout", timeout, "seconds to wait for each reply (default 5)");

  CLI::App* workers = app.add_subcommand("workers", "live workers, memory and disk use");
  bool watch_workers = false;
  workers->add_flag("--watch", watch_workers, "redraw the list every second until interrupted");

  const std::string levels_note = "The _2 levels store two copies on distinct workers.";
  PutArgs put_args;
  CLI::App* put =
      app.add_subcommand("put", "Store FILE (or stdin with -) as block BLOCK_ID. " + levels_note);
  put->add_option("BLOCK_ID", put_args.block,
                  "rdd_<rdd>_<partition>, broadcast_<id> or "
                  "shuffle_<shuffle>_<map>_<reduce>")
      ->required();
  put->add_option("FILE", put_args.file, "the file to store, or - for stdin")->required();
  put->add_option(
      "--level", put_args.level,
      "storage level: " + StorageLevelNames() + " (default MEMORY_AND_DISK). " + levels_note);
  put->add_option("--worker", put_args.worker,
                  "store on this worker instead of letting bmctl choose");
  put->add_option("--replication", put_args.replication,
                  "copies to store on distinct workers (default: 2 for the _2 levels, else 1)")
      ->check(CLI::Range(1, 16));

  std::string get_block;
  std::string get_output;
  CLI::App* get = app.add_subcommand("get", "write a block's exact bytes to stdout or a file");
  get->add_option("BLOCK_ID", get_block, "the block to read")->required();
  get->add_option("-o,--output", get_output,
                  "write to FILE (created only once the whole block arrived)");

  std::vector<std::string> locations_blocks;
  CLI::App* locations =
      app.add_subcommand("locations", "which workers hold the blocks, tier, size");
  locations->add_option("BLOCK_ID", locations_blocks, "blocks to look up")->required();

  std::vector<std::string> verify_blocks;
  std::string verify_rdd;
  std::string verify_worker;
  CLI::App* verify = app.add_subcommand(
      "verify",
      "have the workers re-read and check every copy of the blocks now (corrupt copies are "
      "dropped and restored from good ones); exit 1 when any copy was not intact");
  verify->add_option("BLOCK_ID", verify_blocks, "blocks to verify");
  CLI::Option* verify_rdd_option =
      verify->add_option("--rdd", verify_rdd, "every block of this RDD");
  CLI::Option* verify_worker_option =
      verify->add_option("--worker", verify_worker, "every block on this worker");

  std::string blocks_rdd;
  CLI::App* blocks = app.add_subcommand("blocks", "every block (of one RDD)");
  CLI::Option* blocks_rdd_option =
      blocks->add_option("--rdd", blocks_rdd, "only the blocks of this RDD");

  CLI::App* rdds = app.add_subcommand("rdds", "cached RDDs: partitions, bytes, workers");

  std::vector<std::string> rm_blocks;
  CLI::App* rm = app.add_subcommand("rm", "remove blocks everywhere");
  rm->add_option("BLOCK_ID", rm_blocks, "blocks to remove")->required();

  std::string rm_rdd_id;
  CLI::App* rm_rdd = app.add_subcommand("rm-rdd", "remove every block of an RDD");
  rm_rdd->add_option("RDD_ID", rm_rdd_id, "the RDD")->required();

  std::string decommission_worker;
  int decommission_wait_seconds = 600;
  CLI::App* decommission = app.add_subcommand(
      "decommission",
      "drain a worker: it takes no new blocks, its blocks are copied to other workers, then it "
      "exits; waits until it is gone");
  decommission->add_option("WORKER_ID", decommission_worker, "the worker")->required();
  decommission
      ->add_option("--wait", decommission_wait_seconds,
                   "give up waiting after this many seconds (the drain goes on)")
      ->check(CLI::Range(0, 86400));

  std::string keygen_name;
  std::string keygen_role;
  std::string keygen_dir;
  CLI::App* keygen = app.add_subcommand(
      "keygen",
      "make a keypair: DIR/NAME.key (public, for the allow-lists) and DIR/NAME.key_secret "
      "(mode 0600, for --key); for a worker, NAME is its worker id");
  keygen->add_option("NAME", keygen_name, "the key's name")->required();
  keygen->add_option("--role", keygen_role, "master, worker, client or admin")
      ->required()
      ->check(CLI::IsMember({"master", "worker", "client", "admin"}));
  keygen->add_option("--out", keygen_dir, "the folder to write the files to")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    return UsageError(e.what());
  }

  if (keygen->parsed()) {
    Result<KeyRole> role = ParseKeyRole(keygen_role);
    if (!role.ok()) return UsageError(role.status().message());
    Status made = GenerateCertificate(keygen_dir, keygen_name, *role);
    if (!made.ok()) return Fail(made);
    std::cout << "wrote " << keygen_dir << "/" << keygen_name << ".key and " << keygen_dir << "/"
              << keygen_name << ".key_secret (" << keygen_role << ")\n";
    return 0;
  }

  // Every argument is checked before the master is contacted.
  if (master.empty()) return UsageError("--master is required");
  if (Status s = ValidateMasterAddress(master); !s.ok()) return UsageError(s.message());
  if (key_file.empty() != master_key_file.empty()) {
    return UsageError(
        "--key and --master-key go together (or BLOCKMGR_KEY and "
        "BLOCKMGR_MASTER_KEY)");
  }
  Result<std::chrono::milliseconds> request_timeout = ParseTimeout(timeout);
  if (!request_timeout.ok()) return UsageError(request_timeout.status().message());

  std::vector<BlockId> ids;
  std::optional<uint64_t> rdd_id;
  StorageLevel level = StorageLevel::kMemoryAndDisk;
  auto parse_ids = [&](const std::vector<std::string>& texts) -> Status {
    BM_ASSIGN_OR_RETURN(ids, ParseBlockIds(texts));
    return Status::Ok();
  };
  Status valid;
  if (put->parsed()) {
    valid = parse_ids({put_args.block});
    if (valid.ok()) {
      Result<StorageLevel> parsed = ParseStorageLevel(put_args.level);
      if (parsed.ok())
        level = *parsed;
      else
        valid = parsed.status();
    }
    if (valid.ok() && put->count("--worker") > 0 && put_args.worker.empty()) {
      valid = InvalidArgumentError("--worker needs a worker id");
    }
  } else if (get->parsed()) {
    valid = parse_ids({get_block});
    if (valid.ok() && get->count("--output") > 0 && get_output.empty()) {
      valid = InvalidArgumentError("--output needs a file name");
    }
  } else if (locations->parsed()) {
    valid = parse_ids(locations_blocks);
  } else if (verify->parsed()) {
    const int ways = (verify_blocks.empty() ? 0 : 1) + (verify_rdd_option->count() > 0 ? 1 : 0) +
                     (verify_worker_option->count() > 0 ? 1 : 0);
    if (ways != 1) {
      valid =
          InvalidArgumentError("verify takes BLOCK_ID..., --rdd N or --worker ID (one of them)");
    } else if (!verify_blocks.empty()) {
      valid = parse_ids(verify_blocks);
    } else if (verify_rdd_option->count() > 0) {
      Result<uint64_t> parsed = ParseUnsigned("RDD id", verify_rdd);
      if (parsed.ok())
        rdd_id = *parsed;
      else
        valid = parsed.status();
    } else if (verify_worker.empty()) {
      valid = InvalidArgumentError("--worker needs a worker id");
    }
  } else if (rm->parsed()) {
    valid = parse_ids(rm_blocks);
  } else if (blocks->parsed() && blocks_rdd_option->count() > 0) {
    Result<uint64_t> parsed = ParseUnsigned("RDD id", blocks_rdd);
    if (parsed.ok())
      rdd_id = *parsed;
    else
      valid = parsed.status();
  } else if (rm_rdd->parsed()) {
    Result<uint64_t> parsed = ParseUnsigned("RDD id", rm_rdd_id);
    if (parsed.ok())
      rdd_id = *parsed;
    else
      valid = parsed.status();
  }
  if (!valid.ok()) return UsageError(valid.message());
  if (progress_on && progress_off) return UsageError("--progress and --no-progress contradict");
  const ProgressMode progress_mode =
      progress_on ? ProgressMode::kOn : (progress_off ? ProgressMode::kOff : ProgressMode::kAuto);

  ClientOptions client_options{master, *request_timeout};
  client_options.key_file = key_file;
  client_options.master_key_file = master_key_file;
  Client client(client_options);

  if (workers->parsed() && watch_workers) {
    return WatchWorkers(client, json);
  } else if (workers->parsed()) {
    Result<std::vector<WorkerInfo>> list = client.Workers();
    if (!list.ok()) return Fail(list.status());
    std::cout << (json ? WorkersToJson(*list).dump(2) + "\n" : WorkersTable(*list));
  } else if (put->parsed()) {
    return RunPut(client, put_args, ids[0], level, json, progress_mode);
  } else if (get->parsed()) {
    SteadyClock clock;
    std::unique_ptr<ProgressLine> progress;
    // The size is looked up only when a progress line may be drawn.
    if (progress_mode == ProgressMode::kOn ||
        (progress_mode == ProgressMode::kAuto && ::isatty(STDERR_FILENO) == 1)) {
      Result<std::vector<BlockLocations>> found = client.Locations({ids[0]});
      uint64_t size = 0;
      if (found.ok() && !found->empty() && !found->front().locations.empty()) {
        size = found->front().locations.front().size;
      }
      progress = MaybeProgress(progress_mode, "get " + ids[0].ToString(), size, clock);
    }
    Status got_all = GetBlock(client, ids[0], get_output, progress.get());
    if (progress) progress->Finish();
    if (!got_all.ok()) return Fail(got_all);
  } else if (locations->parsed()) {
    Result<std::vector<BlockLocations>> found = client.Locations(ids);
    if (!found.ok()) return Fail(found.status());
    std::cout << (json ? LocationsToJson(*found).dump(2) + "\n" : LocationsTable(*found));
  } else if (blocks->parsed()) {
    // Streamed a page at a time, so memory stays bounded however many blocks there are: JSON
    // as an array with one block per line, the table with its header on the first page only.
    bool first = true;
    if (json) std::cout << "[";
    Status listed = client.ForEachBlockPage(rdd_id, [&](const std::vector<BlockLocations>& page) {
      if (json) {
        for (const nlohmann::ordered_json& entry : BlocksToJson(page)) {
          std::cout << (first ? "\n" : ",\n") << entry.dump();
          first = false;
        }
      } else {
        std::string table = BlocksTable(page);
        if (!first) table.erase(0, table.find('\n') + 1);  // the header
        std::cout << table;
        first = false;
      }
      return std::cout ? Status::Ok() : InternalError("writing to stdout failed");
    });
    if (json) std::cout << (first ? "]\n" : "\n]\n");
    if (!listed.ok()) return Fail(listed);
    if (!json && first) std::cout << BlocksTable({});
  } else if (verify->parsed()) {
    std::vector<BlockLocations> targets;
    if (!ids.empty()) {
      Result<std::vector<BlockLocations>> found = client.Locations(ids);
      if (!found.ok()) return Fail(found.status());
      targets = std::move(found).value();
    } else {
      Status listed = client.ForEachBlockPage(rdd_id, [&](const std::vector<BlockLocations>& page) {
        for (const BlockLocations& block : page) {
          if (verify_worker.empty()) {
            targets.push_back(block);
            continue;
          }
          BlockLocations on_worker{block.block, block.level, {}};
          for (const BlockLocation& location : block.locations) {
            if (location.worker_id == verify_worker) on_worker.locations.push_back(location);
          }
          if (!on_worker.locations.empty()) targets.push_back(std::move(on_worker));
        }
        return Status::Ok();
      });
      if (!listed.ok()) return Fail(listed);
    }
    Result<std::vector<CopyCheck>> checks = client.VerifyCopies(targets);
    if (!checks.ok()) return Fail(checks.status());
    std::cout << (json ? VerifyToJson(*checks).dump(2) + "\n" : VerifyText(*checks));
    size_t bad = 0;
    for (const CopyCheck& check : *checks) bad += check.state != CopyCheck::State::kIntact;
    if (bad > 0) {
      std::cout.flush();
      std::cerr << "bmctl: " << bad << " of " << checks->size() << " copies not intact\n";
      return 1;
    }
  } else if (rdds->parsed()) {
    Result<std::vector<RddInfo>> list = client.Rdds();
    if (!list.ok()) return Fail(list.status());
    std::cout << (json ? RddsToJson(*list).dump(2) + "\n" : RddsTable(*list));
  } else if (decommission->parsed()) {
    return RunDecommission(client, decommission_worker,
                           std::chrono::seconds(decommission_wait_seconds), json);
  } else if (rm->parsed() || rm_rdd->parsed()) {
    Result<uint64_t> removed = rm->parsed() ? client.Remove(ids) : client.RemoveRdd(*rdd_id);
    if (!removed.ok()) return Fail(removed.status());
    std::cout << (json ? RemovedToJson(*removed).dump(2) + "\n" : RemovedText(*removed));
  }
  std::cout.flush();
  if (!std::cout) return Fail(InternalError("writing to stdout failed"));
  return 0;
}

}  // namespace
}  // namespace bm

int main(int argc, char** argv) {
  bm::TuneAllocatorForBlockBuffers();
  return bm::Main(argc, argv);
}
