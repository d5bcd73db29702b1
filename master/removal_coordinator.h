#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "master/block_index.h"
#include "master/worker_request_ids.h"

namespace bm {

// Removals of block copies from workers, and the requests that wait for them (schema/
// PROTOCOL.md, "removeBlocks"): a client's removeBlocks or removeRdd, answered with the number
// of distinct blocks the workers confirmed removed; and a worker's block report whose fresh put
// replaced copies on other workers, acknowledged once those copies are gone.
//
// Every removal goes out as removeBlocks commands, one per worker and batch of at most
// kBatch ids. An operation that waits for them goes
//   waiting (commands outstanding) --(last command answered, or its deadline)--> answered
// and is forgotten once answered. A command counts as answered when its worker answers it
// (confirming the removal or not), when it could not be sent (Unsent), or when its worker is
// dropped (WorkerGone). At the deadline the operation is answered with what was confirmed by
// then, and later answers to its commands are ignored (the workers report their removals to
// the master anyway). Commands nobody waits for are not tracked.
//
// The class knows no sockets: callers are opaque ids chosen by the caller, commands carry the
// request id the worker echoes, and every method returns what the caller must send or apply.
// The clock and the request ids are borrowed and must outlive it.
// Not thread-safe: owned by the master's loop.
class RemovalCoordinator {
 public:
  // Block ids per removeBlocks command, so a big RDD's removal stays far below the header size
  // limit.
  static constexpr size_t kBatch = 10000;

  // A removeBlocks to send to a worker.
  struct Command {
    uint64_t request_id = 0;
    std::string worker_id{};
    std::vector<BlockId> blocks{};
    std::vector<uint64_t> versions{};  // empty (whatever version it holds), or one per block
  };

  // The answer to a waiting caller.
  struct Reply {
    enum class Kind {
      kRemoved,       // a client's removal: `removed` distinct blocks confirmed removed
      kAcknowledged,  // a block report: its replaced copies are gone (or the wait is over)
    };
    Kind kind;
    uint64_t caller = 0;
    size_t removed = 0;
  };

  // What starting an operation produced: the commands to send (report any that cannot be sent
  // to Unsent()), and the reply when there is nothing to wait for.
  struct Started {
    std::vector<Command> commands;
    std::optional<Reply> reply;
  };

  // What a worker's answer to a command did: the removals it confirmed (to drop from the
  // index and journal) and, when it was its operation's last, the operation's reply.
  struct Answered {
    std::vector<BlockChange> removed;
    std::optional<Reply> reply;
  };

  RemovalCoordinator(const Clock& clock, WorkerRequestIds& request_ids)
      : clock_(clock), request_ids_(request_ids) {}

  // A client's removal of `requested` distinct block ids, held by the workers in `holders`
  // (the blocks of each worker, as BlockIndex::Holders gives them). Answered within `timeout`.
  Started RemoveBlocks(uint64_t caller, size_t requested,
                       const std::map<std::string, std::vector<BlockId>>& holders,
                       Duration timeout);

  // Removes exactly these versions of these copies; the caller is acknowledged once they are
  // gone, or after `timeout`.
  Started AwaitRemoval(uint64_t caller, const std::vector<RetiredCopy>& copies, Duration timeout);

  // Removes exactly these versions of these copies; nobody waits (the workers' own reports
  // confirm the removals).
  std::vector<Command> RemoveCopies(const std::vector<RetiredCopy>& copies);

  // A command could not be sent: it counts as answered, confirming nothing.
  std::optional<Reply> Unsent(uint64_t request_id);

  // `worker_id` answered request `request_id`: `answer` is ok when it removed the blocks.
  // Answers to unknown requests (their operation timed out, or they were not tracked) and
  // answers from another worker than the one asked are ignored.
  Answered WorkerAnswered(std::string_view worker_id, uint64_t request_id, const Status& answer);

  // The worker was dropped: its commands count as answered, confirming nothing.
  std::vector<Reply> WorkerGone(std::string_view worker_id);

  // Answers the operations whose deadline has passed with what was confirmed so far.
  std::vector<Reply> Expire();

  // Drops every waiting operation (the server is stopping); returns their callers.
  std::vector<uint64_t> TakeAllCallers();

  // The next time Expire() has something to do; nullopt when nothing waits.
  std::optional<TimePoint> NextDeadline() const;

  size_t waiting() const { return operations_.size(); }

 private:
  struct Operation {
    uint64_t caller = 0;
    Reply::Kind kind = Reply::Kind::kRemoved;
    size_t requested = 0;  // kRemoved: the distinct ids asked for
    TimePoint deadline{};
    size_t outstanding = 0;  // commands not answered yet
    std::unordered_set<BlockId> confirmed{};
  };

  // A tracked command: which operation waits for it.
  struct Outstanding {
    uint64_t operation = 0;
    Command command;
  };

  // Splits the copies into commands by worker (in worker id order) and batch.
  std::vector<Command> CommandsFor(const std::vector<RetiredCopy>& copies);
  // Tracks the commands for a new operation; answers it at once when there are none.
  Started Track(Operation operation, std::vector<Command> commands);
  // One of the operation's commands was answered; returns its reply if that was the last.
  std::optional<Reply> Finish(uint64_t operation_id);
  Reply ReplyTo(const Operation& operation) const;

  const Clock& clock_;
  WorkerRequestIds& request_ids_;
  std::unordered_map<uint64_t, Operation> operations_;     // by operation id
  std::unordered_map<uint64_t, Outstanding> outstanding_;  // by request id
  uint64_t next_operation_id_ = 1;
};

}  // namespace bm
