#include "worker/epoch_fence.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bm {

Result<EpochFence> EpochFence::Open(std::string path) {
  if (path.empty() || !std::filesystem::exists(path)) return EpochFence(std::move(path), 0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return InternalError("cannot read the leader epoch file " + path);
  std::string content = text.str();
  while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.pop_back();
  uint64_t epoch = 0;
  auto [end, error] = std::from_chars(content.data(), content.data() + content.size(), epoch);
  if (error != std::errc() || end != content.data() + content.size() || content.empty()) {
    return InternalError("the leader epoch file " + path + " does not hold a number: '" +
                         content.substr(0, 40) + "'");
  }
  return EpochFence(std::move(path), epoch);
}

Status EpochFence::Raise(uint64_t epoch) {
  if (epoch <= highest_) return Status::Ok();
  spdlog::info("following leader epoch {} (was {}): commands from older epochs are refused", epoch,
               highest_);
  highest_ = epoch;
  if (path_.empty()) return Status::Ok();
  const std::string temporary = path_ + ".new";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << epoch << '\n';
    if (!out.flush()) return InternalError("cannot write the leader epoch file " + temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path_, error);
  if (error) {
    return InternalError("cannot replace the leader epoch file " + path_ + ": " + error.message());
  }
  return Status::Ok();
}

Status EpochFence::Admit(uint64_t epoch, const char* command) {
  if (epoch == 0) return Status::Ok();
  if (epoch < highest_) {
    return PermissionDeniedError(std::string(command) + " from a master of leader epoch " +
                                 std::to_string(epoch) + " refused: this worker follows epoch " +
                                 std::to_string(highest_) + " (a deposed leader)");
  }
  if (Status raised = Raise(epoch); !raised.ok()) spdlog::warn("{}", raised.ToString());
  return Status::Ok();
}

}  // namespace bm
