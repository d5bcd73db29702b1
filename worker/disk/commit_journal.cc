#include "worker/disk/commit_journal.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

namespace bm {
namespace {

constexpr char kCommitted = 'C';
constexpr char kRemoved = 'R';

// FNV-1a, 64 bits: enough to tell a damaged line from a good one.
uint64_t Checksum(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : text) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string Hex(uint64_t value) {
  char buffer[17];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value, 16);
  return std::string(buffer, end);
}

// "K GENERATION ID CHECKSUM\n", the checksum covering everything before it.
std::string FormatLine(char kind, const BlockId& id, uint64_t generation) {
  std::string body = std::string(1, kind) + " " + std::to_string(generation) + " " + id.ToString();
  return body + " " + Hex(Checksum(body)) + "\n";
}

struct Line {
  char kind;
  uint64_t generation;
  BlockId id;
};

std::optional<Line> ParseLine(std::string_view line) {
  const size_t last_space = line.rfind(' ');
  if (last_space == std::string_view::npos) return std::nullopt;
  const std::string_view body = line.substr(0, last_space);
  const std::string_view sum = line.substr(last_space + 1);
  uint64_t expected = 0;
  auto [sum_end, sum_ec] = std::from_chars(sum.data(), sum.data() + sum.size(), expected, 16);
  if (sum_ec != std::errc() || sum_end != sum.data() + sum.size() || Checksum(body) != expected) {
    return std::nullopt;
  }
  if (body.size() < 5 || (body[0] != kCommitted && body[0] != kRemoved) || body[1] != ' ') {
    return std::nullopt;
  }
  const std::string_view rest = body.substr(2);
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  uint64_t generation = 0;
  auto [gen_end, gen_ec] = std::from_chars(rest.data(), rest.data() + space, generation);
  if (gen_ec != std::errc() || gen_end != rest.data() + space) return std::nullopt;
  Result<BlockId> id = BlockId::Parse(rest.substr(space + 1));
  if (!id.ok()) return std::nullopt;
  return Line{body[0], generation, *id};
}

Status WriteAllTo(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("writing " + path + ": " + std::strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CommitJournal>> CommitJournal::Open(const std::string& path) {
  std::map<BlockId, uint64_t> recorded;
  std::map<BlockId, uint64_t> removed;
  uint64_t damaged = 0;
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  if (existed) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return InternalError("cannot read " + path + ": " + std::strerror(errno));
    std::string line;
    while (std::getline(in, line)) {
      std::optional<Line> parsed = ParseLine(line);
      if (!parsed.has_value()) {
        ++damaged;
        continue;
      }
      if (parsed->kind == kCommitted) {
        recorded[parsed->id] = parsed->generation;
        removed.erase(parsed->id);
      } else {
        if (auto found = recorded.find(parsed->id);
            found != recorded.end() && found->second <= parsed->generation) {
          recorded.erase(found);
        }
        removed[parsed->id] = parsed->generation;
      }
    }
    if (in.bad()) return InternalError("cannot read " + path);
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot open " + path + ": " + std::strerror(errno));
  std::unique_ptr<CommitJournal> journal(new CommitJournal(path, fd));
  journal->recorded_ = std::move(recorded);
  journal->removed_ = std::move(removed);
  journal->existed_ = existed;
  journal->damaged_lines_ = damaged;
  if (damaged > 0) {
    spdlog::warn("commit journal {}: skipped {} damaged lines", path, damaged);
  }
  return journal;
}

CommitJournal::~CommitJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void CommitJournal::RecordCommitted(const BlockId& id, uint64_t generation) {
  Append(kCommitted, id, generation);
}

void CommitJournal::RecordRemoved(const BlockId& id, uint64_t generation) {
  Append(kRemoved, id, generation);
}

void CommitJournal::Append(char kind, const BlockId& id, uint64_t generation) {
  ++lines_since_rewrite_;
  if (fd_ < 0) return;
  // One write(2) per line: O_APPEND puts it whole at the end, or (on a full disk) not at all
  // or torn, which the reader's checksum catches.
  Status written = WriteAllTo(fd_, FormatLine(kind, id, generation), path_);
  if (!written.ok() && complete_) {
    spdlog::warn("commit journal incomplete until the next restart: {}", written.ToString());
    complete_ = false;
  }
}

Status CommitJournal::Rewrite(const std::map<BlockId, uint64_t>& live,
                              const std::map<BlockId, uint64_t>& removed) {
  const std::string temp = path_ + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot create " + temp + ": " + std::strerror(errno));
  std::string text;
  for (const auto& [id, generation] : removed) text += FormatLine(kRemoved, id, generation);
  for (const auto& [id, generation] : live) {
    text += FormatLine(kCommitted, id, generation);
    if (text.size() >= (1 << 20)) {
      if (Status s = WriteAllTo(fd, text, temp); !s.ok()) {
        ::close(fd);
        ::unlink(temp.c_str());
        return s;
      }
      text.clear();
    }
  }
  Status status = WriteAllTo(fd, text, temp);
  if (status.ok() && ::fsync(fd) != 0) {
    status = InternalError("syncing " + temp + ": " + std::strerror(errno));
  }
  ::close(fd);
  if (status.ok() && ::rename(temp.c_str(), path_.c_str()) != 0) {
    status = InternalError("renaming " + temp + ": " + std::strerror(errno));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  if (int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  const int new_fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (new_fd < 0) return InternalError("cannot reopen " + path_ + ": " + std::strerror(errno));
  if (fd_ >= 0) ::close(fd_);
  fd_ = new_fd;
  lines_since_rewrite_ = 0;
  complete_ = true;
  return Status::Ok();
}

}  // namespace bm
