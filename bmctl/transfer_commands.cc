// bmctl put and get: a block's bytes between a file (or stdin/stdout) and the cluster.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/storage_level.h"
#include "bmctl/args.h"
#include "bmctl/commands.h"
#include "bmctl/output.h"
#include "common/core/clock.h"

namespace bm {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

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

// The progress line of a transfer of `total` bytes on stderr, when it should be shown.
std::unique_ptr<ProgressLine> MaybeProgress(ProgressMode mode, const std::string& label,
                                            uint64_t total, const Clock& clock) {
  if (!ShouldShowProgress(mode, total, ::isatty(STDERR_FILENO) == 1)) return nullptr;
  return std::make_unique<ProgressLine>(std::cerr, label, total, clock);
}

// bmctl put BLOCK_ID FILE: a regular file is streamed (with a progress line when wanted);
// stdin and other files without a size are buffered whole first.
class PutCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    const std::string levels_note = "The _2 levels store two copies on distinct workers.";
    CLI::App* put =
        app.add_subcommand("put", "Store FILE (or stdin with -) as block BLOCK_ID. " + levels_note);
    put->add_option("BLOCK_ID", block_,
                    "rdd_<rdd>_<partition>, broadcast_<id> or "
                    "shuffle_<shuffle>_<map>_<reduce>")
        ->required();
    put->add_option("FILE", file_, "the file to store, or - for stdin")->required();
    put->add_option(
        "--level", level_name_,
        "storage level: " + StorageLevelNames() + " (default MEMORY_AND_DISK). " + levels_note);
    worker_option_ = put->add_option("--worker", worker_,
                                     "store on this worker instead of letting bmctl choose");
    put->add_option("--replication", replication_,
                    "copies to store on distinct workers (default: 2 for the _2 levels, else 1)")
        ->check(CLI::Range(1, 16));
    put->add_option("--compute-cost", compute_cost_text_,
                    "what the block took to compute, e.g. 2.5s or 150ms: a worker evicting by "
                    "cost (bm-worker --eviction cost) keeps what is expensive to recompute");
    return put;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(id_, BlockId::Parse(block_));
    BM_ASSIGN_OR_RETURN(level_, ParseStorageLevel(level_name_));
    if (worker_option_->count() > 0 && worker_.empty()) {
      return InvalidArgumentError("--worker needs a worker id");
    }
    if (!compute_cost_text_.empty()) {
      BM_ASSIGN_OR_RETURN(compute_cost_, ParseComputeCost(compute_cost_text_));
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    Result<PutResult> put = Put(client, output.progress);
    if (!put.ok()) return Fail(put.status());
    if (put->replicas.size() < put->copies_wanted) {
      std::cerr << "bmctl: warning: only " << put->replicas.size() << " of " << put->copies_wanted
                << " copies stored: not enough workers could take the block\n";
    }
    if (output.json) {
      std::cout << PutToJson(*id_, *put).dump(2) << "\n";
    } else {
      std::cout << PutText(*id_, *put);
    }
    return kExitSuccess;
  }

 private:
  Result<PutResult> Put(Client& client, ProgressMode progress_mode) {
    PutOptions options;
    if (!worker_.empty()) options.worker_id = worker_;
    options.replication = replication_;
    options.compute_cost = compute_cost_;
    std::vector<std::byte> data;
    if (file_ == "-") {
      BM_ASSIGN_OR_RETURN(data, ReadAll(STDIN_FILENO, "stdin"));
      return client.Put(*id_, data, level_, options);
    }
    BM_ASSIGN_OR_RETURN(PutInput input, OpenPutInput(file_));
    if (input.regular) {
      std::ifstream in(file_, std::ios::binary);
      if (!in) return InternalError("cannot open " + file_ + ": " + ErrnoText());
      SteadyClock clock;
      std::unique_ptr<ProgressLine> progress =
          MaybeProgress(progress_mode, "put " + id_->ToString(), input.size, clock);
      if (!progress) return client.PutStream(*id_, in, input.size, level_, options);
      ProgressStreamBuf counted_buffer(*in.rdbuf(), *progress);
      std::istream counted(&counted_buffer);
      Result<PutResult> put = client.PutStream(*id_, counted, input.size, level_, options);
      progress->Finish();
      return put;
    }
    BM_ASSIGN_OR_RETURN(data, ReadAll(input.fd->get(), file_));
    return client.Put(*id_, data, level_, options);
  }

  // Parsed by CLI11.
  std::string block_;
  std::string file_;
  std::string level_name_ = "MEMORY_AND_DISK";
  std::string worker_;
  uint32_t replication_ = 0;  // 0: as the level says
  std::string compute_cost_text_;
  CLI::Option* worker_option_ = nullptr;
  // Set by Validate.
  std::optional<BlockId> id_;
  std::chrono::microseconds compute_cost_{0};
  StorageLevel level_ = StorageLevel::kMemoryAndDisk;
};

// bmctl get BLOCK_ID [-o FILE]: the block's exact bytes to stdout or a file.
class GetCommand : public BmctlCommand {
 public:
  CLI::App* AddTo(CLI::App& app) override {
    CLI::App* get = app.add_subcommand("get", "write a block's exact bytes to stdout or a file");
    get->add_option("BLOCK_ID", block_, "the block to read")->required();
    output_option_ = get->add_option("-o,--output", output_,
                                     "write to FILE (created only once the whole block arrived)");
    return get;
  }

  Status Validate() override {
    BM_ASSIGN_OR_RETURN(id_, BlockId::Parse(block_));
    if (output_option_->count() > 0 && output_.empty()) {
      return InvalidArgumentError("--output needs a file name");
    }
    return Status::Ok();
  }

  int Run(Client& client, const OutputOptions& output) override {
    SteadyClock clock;
    std::unique_ptr<ProgressLine> progress;
    // The size is looked up only when a progress line may be drawn.
    if (output.progress == ProgressMode::kOn ||
        (output.progress == ProgressMode::kAuto && ::isatty(STDERR_FILENO) == 1)) {
      Result<std::vector<BlockLocations>> found = client.Locations({*id_});
      uint64_t size = 0;
      if (found.ok() && !found->empty() && !found->front().locations.empty()) {
        size = found->front().locations.front().size;
      }
      progress = MaybeProgress(output.progress, "get " + id_->ToString(), size, clock);
    }
    Status got_all = GetBlock(client, *id_, output_, progress.get());
    if (progress) progress->Finish();
    if (!got_all.ok()) return Fail(got_all);
    return FlushStdout();
  }

 private:
  // Parsed by CLI11.
  std::string block_;
  std::string output_;
  CLI::Option* output_option_ = nullptr;
  // Set by Validate.
  std::optional<BlockId> id_;
};

}  // namespace

std::unique_ptr<BmctlCommand> MakePutCommand() { return std::make_unique<PutCommand>(); }
std::unique_ptr<BmctlCommand> MakeGetCommand() { return std::make_unique<GetCommand>(); }

}  // namespace bm
