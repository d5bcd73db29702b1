#include "master/removal_coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace bm {

RemovalCoordinator::Started RemovalCoordinator::RemoveBlocks(
    uint64_t caller, size_t requested, const std::map<std::string, std::vector<BlockId>>& holders,
    Duration timeout) {
  std::vector<Command> commands;
  for (const auto& [worker_id, blocks] : holders) {
    for (size_t start = 0; start < blocks.size(); start += kBatch) {
      const size_t end = std::min(blocks.size(), start + kBatch);
      commands.push_back(
          Command{.request_id = request_ids_.Next(),
                  .worker_id = worker_id,
                  .blocks = std::vector<BlockId>(blocks.begin() + start, blocks.begin() + end),
                  .versions = {}});
    }
  }
  return Track(Operation{.caller = caller,
                         .kind = Reply::Kind::kRemoved,
                         .requested = requested,
                         .deadline = clock_.Now() + timeout},
               std::move(commands));
}

RemovalCoordinator::Started RemovalCoordinator::AwaitRemoval(uint64_t caller,
                                                             const std::vector<RetiredCopy>& copies,
                                                             Duration timeout) {
  return Track(
      Operation{
          .caller = caller, .kind = Reply::Kind::kAcknowledged, .deadline = clock_.Now() + timeout},
      CommandsFor(copies));
}

std::vector<RemovalCoordinator::Command> RemovalCoordinator::RemoveCopies(
    const std::vector<RetiredCopy>& copies) {
  return CommandsFor(copies);
}

std::vector<RemovalCoordinator::Command> RemovalCoordinator::CommandsFor(
    const std::vector<RetiredCopy>& copies) {
  std::map<std::string, std::vector<const RetiredCopy*>> by_worker;
  for (const RetiredCopy& copy : copies) by_worker[copy.worker_id].push_back(&copy);
  std::vector<Command> commands;
  for (const auto& [worker_id, held] : by_worker) {
    for (size_t start = 0; start < held.size(); start += kBatch) {
      const size_t end = std::min(held.size(), start + kBatch);
      Command command{.request_id = request_ids_.Next(), .worker_id = worker_id};
      command.blocks.reserve(end - start);
      command.versions.reserve(end - start);
      for (size_t i = start; i < end; ++i) {
        command.blocks.push_back(held[i]->id);
        command.versions.push_back(held[i]->version);
      }
      commands.push_back(std::move(command));
    }
  }
  return commands;
}

RemovalCoordinator::Started RemovalCoordinator::Track(Operation operation,
                                                      std::vector<Command> commands) {
  Started started;
  if (commands.empty()) {
    started.reply = ReplyTo(operation);
    return started;
  }
  const uint64_t operation_id = next_operation_id_++;
  operation.outstanding = commands.size();
  for (const Command& command : commands) {
    outstanding_.emplace(command.request_id, Outstanding{operation_id, command});
  }
  operations_.emplace(operation_id, std::move(operation));
  started.commands = std::move(commands);
  return started;
}

std::optional<RemovalCoordinator::Reply> RemovalCoordinator::Unsent(uint64_t request_id) {
  auto it = outstanding_.find(request_id);
  if (it == outstanding_.end()) return std::nullopt;
  const uint64_t operation_id = it->second.operation;
  outstanding_.erase(it);
  return Finish(operation_id);
}

RemovalCoordinator::Answered RemovalCoordinator::WorkerAnswered(std::string_view worker_id,
                                                                uint64_t request_id,
                                                                const Status& answer) {
  Answered answered;
  auto it = outstanding_.find(request_id);
  if (it == outstanding_.end() || it->second.command.worker_id != worker_id) return answered;
  Outstanding request = std::move(it->second);
  outstanding_.erase(it);
  auto operation = operations_.find(request.operation);
  BM_CHECK(operation != operations_.end());
  const Command& command = request.command;
  if (answer.ok()) {
    answered.removed.reserve(command.blocks.size());
    for (size_t i = 0; i < command.blocks.size(); ++i) {
      BlockChange removal{command.blocks[i], /*removed=*/true};
      if (!command.versions.empty()) removal.version = command.versions[i];
      answered.removed.push_back(removal);
      operation->second.confirmed.insert(command.blocks[i]);
    }
  } else {
    spdlog::warn("worker {} could not remove {} blocks: {}", worker_id, command.blocks.size(),
                 answer.ToString());
  }
  answered.reply = Finish(request.operation);
  return answered;
}

std::vector<RemovalCoordinator::Reply> RemovalCoordinator::WorkerGone(std::string_view worker_id) {
  std::vector<uint64_t> answered;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (it->second.command.worker_id == worker_id) {
      answered.push_back(it->second.operation);
      it = outstanding_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<Reply> replies;
  for (uint64_t operation_id : answered) {
    if (std::optional<Reply> reply = Finish(operation_id)) replies.push_back(*reply);
  }
  return replies;
}

std::vector<RemovalCoordinator::Reply> RemovalCoordinator::Expire() {
  const TimePoint now = clock_.Now();
  std::vector<uint64_t> expired;
  for (const auto& [operation_id, operation] : operations_) {
    if (operation.deadline <= now) expired.push_back(operation_id);
  }
  std::vector<Reply> replies;
  if (expired.empty()) return replies;
  const std::unordered_set<uint64_t> expired_set(expired.begin(), expired.end());
  std::erase_if(outstanding_,
                [&](const auto& entry) { return expired_set.contains(entry.second.operation); });
  for (uint64_t operation_id : expired) {
    auto operation = operations_.find(operation_id);
    spdlog::warn("remove timed out waiting for {} worker requests", operation->second.outstanding);
    replies.push_back(ReplyTo(operation->second));
    operations_.erase(operation);
  }
  return replies;
}

std::vector<uint64_t> RemovalCoordinator::TakeAllCallers() {
  std::vector<uint64_t> callers;
  callers.reserve(operations_.size());
  for (const auto& [operation_id, operation] : operations_) callers.push_back(operation.caller);
  operations_.clear();
  outstanding_.clear();
  return callers;
}

std::optional<TimePoint> RemovalCoordinator::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const auto& [operation_id, operation] : operations_) {
    next = next ? std::min(*next, operation.deadline) : operation.deadline;
  }
  return next;
}

std::optional<RemovalCoordinator::Reply> RemovalCoordinator::Finish(uint64_t operation_id) {
  auto operation = operations_.find(operation_id);
  BM_CHECK(operation != operations_.end());
  BM_CHECK(operation->second.outstanding > 0);
  if (--operation->second.outstanding > 0) return std::nullopt;
  Reply reply = ReplyTo(operation->second);
  operations_.erase(operation);
  return reply;
}

RemovalCoordinator::Reply RemovalCoordinator::ReplyTo(const Operation& operation) const {
  if (operation.kind == Reply::Kind::kRemoved) {
    spdlog::info("removed {} of {} requested blocks", operation.confirmed.size(),
                 operation.requested);
  }
  return Reply{
      .kind = operation.kind, .caller = operation.caller, .removed = operation.confirmed.size()};
}

}  // namespace bm
