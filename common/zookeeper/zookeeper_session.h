#pragma once

// One ZooKeeper session over the C client (libzookeeper-mt), for the leader election and the
// leader directory. Internal to the servers and tools: no ZooKeeper type appears here.

#include <spdlog/common.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/status.h"
#include "common/core/clock.h"
#include "common/core/mutex.h"

typedef struct _zhandle zhandle_t;  // NOLINT: the C client's opaque handle

namespace bm {

// Where a blockmgr cluster lives in ZooKeeper: "host:port[,host:port...][/chroot]". Every path
// a ZooKeeperSession takes is relative to the chroot, which defaults to /blockmgr so that a
// ZooKeeper shared with other systems keeps blockmgr's znodes in one subtree.
struct ZooKeeperAddress {
  std::string hosts;                 // "host:port,host:port"
  std::string chroot = "/blockmgr";  // "/a/b": absolute, no trailing slash
};

// kInvalidArgument for an empty host list, a host without a port, or a malformed chroot.
Result<ZooKeeperAddress> ParseZooKeeperAddress(const std::string& connect);

// The ZooKeeper C client's own log lines (connection attempts and losses: dozens a second
// while ZooKeeper is away) go to spdlog at `level`: the first, then at most one per `interval`
// saying how many were held back in between. Process-wide, as the C client's log callback has
// no context; by default warn, every kClientLogInterval. A tool whose own error says that
// ZooKeeper cannot be reached (bmctl) passes debug.
inline constexpr std::chrono::seconds kClientLogInterval{30};
void SetZooKeeperClientLog(spdlog::level::level_enum level, Duration interval = kClientLogInterval);

// The session as the C client last reported it.
//   connecting --(server answered)--> connected --(connection lost or silent)--> connecting
//   any --(server expired the session / refused it)--> expired (final: open a new session)
enum class ZooKeeperState { kConnecting, kConnected, kExpired };
const char* ZooKeeperStateName(ZooKeeperState state);

// What the C client reports: a session state change (`path` empty), or a watch that fired on a
// znode (`path` relative to the chroot).
struct ZooKeeperEvent {
  enum class Kind { kSession, kCreated, kDeleted, kDataChanged, kChildrenChanged, kOther };
  Kind kind = Kind::kSession;
  ZooKeeperState state = ZooKeeperState::kConnecting;
  std::string path;
};

// A znode as read: its data, version (for version-checked writes) and, for an ephemeral
// znode, the id of the session that owns it (0 for a persistent one).
struct ZooKeeperNode {
  std::string data;
  int32_t version = 0;
  int64_t ephemeral_owner = 0;
};

// One step of an atomic multi (ZooKeeper's `multi`: all steps succeed or none).
struct ZooKeeperOp {
  enum class Kind { kCreate, kSetData, kDelete, kCheck };
  Kind kind = Kind::kCheck;
  std::string path;
  std::string data{};
  int32_t version = -1;    // kSetData / kDelete / kCheck: -1 = any
  bool ephemeral = false;  // kCreate
};

// The id and password of a session: who owns an ephemeral znode, and (in tests) a way to take
// a session over and close it, which expires it for its owner.
struct ZooKeeperSessionId {
  int64_t id = 0;
  std::string password;
};

// A ZooKeeper session: opened at construction (the C client connects in the background and
// reconnects by itself until the server expires the session), closed on destruction, which
// deletes its ephemeral znodes at once when the server can be reached.
//
// Errors of the operations: kNotFound (no such znode), kAborted (the znode exists already, or
// its version moved: someone else got there first), kUnavailable (not connected, connection
// lost mid-call, session expired), kInternal (anything else).
//
// Thread-safety: the synchronous operations may be called from any thread but must never be
// called from `on_event`, which runs on the C client's own thread and must not block (a
// blocked callback stalls every reply and watch of the session). state() is thread-safe.
class ZooKeeperSession {
 public:
  using EventHandler = std::function<void(const ZooKeeperEvent&)>;

  // kInvalidArgument when the C client refuses the host list. `resume` takes over an existing
  // session instead of starting a new one (tests use it to expire a session).
  static Result<std::unique_ptr<ZooKeeperSession>> Open(
      const ZooKeeperAddress& address, std::chrono::milliseconds session_timeout,
      EventHandler on_event, const std::optional<ZooKeeperSessionId>& resume = std::nullopt);
  ~ZooKeeperSession();
  ZooKeeperSession(const ZooKeeperSession&) = delete;
  ZooKeeperSession& operator=(const ZooKeeperSession&) = delete;

  ZooKeeperState state() const;
  // Waits until connected; false when `deadline` passes first or the session expired.
  bool WaitConnected(std::chrono::steady_clock::time_point deadline) const;
  // The session id (0 before the first connection) and password.
  ZooKeeperSessionId id() const;
  // The session timeout the server granted (it clamps the asked one to its min/max).
  std::chrono::milliseconds negotiated_timeout() const;
  const ZooKeeperAddress& address() const { return address_; }

  // Creates the chroot and `path` below it with every missing parent (persistent, empty).
  Status EnsurePath(const std::string& path);
  // Creates `path`; with `sequential` the server appends a 10-digit counter. Returns the
  // created path (relative to the chroot).
  Result<std::string> Create(const std::string& path, const std::string& data, bool ephemeral,
                             bool sequential);
  // With `watch`, a kDataChanged or kDeleted event follows the next change.
  Result<ZooKeeperNode> Get(const std::string& path, bool watch);
  // With `watch`, a kCreated, kDeleted or kDataChanged event follows the next change, whether
  // the znode exists now or not.
  Result<bool> Exists(const std::string& path, bool watch);
  // The names (not paths) of the children of `path`, unsorted; never leaves a watch.
  Result<std::vector<std::string>> Children(const std::string& path);
  Status Delete(const std::string& path, int32_t version);
  Status Multi(const std::vector<ZooKeeperOp>& ops);

 private:
  ZooKeeperSession(ZooKeeperAddress address, EventHandler on_event);
  static void Watcher(zhandle_t* zh, int type, int state, const char* path, void* context);
  std::string FullPath(const std::string& path) const;
  // Called by the C client's thread with every event.
  void OnEvent(int type, int state, const char* path);

  const ZooKeeperAddress address_;
  const EventHandler on_event_;
  zhandle_t* handle_ = nullptr;  // set once in Open, closed in the destructor

  mutable Mutex mutex_;
  mutable std::condition_variable state_changed_;
  ZooKeeperState state_ BM_GUARDED_BY(mutex_) = ZooKeeperState::kConnecting;
};

// Hands events from the C client's thread to the thread that owns a session: pushing never
// blocks for long; Next waits. Thread-safe.
class ZooKeeperEventQueue {
 public:
  void Push(ZooKeeperEvent event, uint64_t session_serial);
  // Wakes the waiter; Next returns nothing from now on.
  void Stop();
  bool stopped() const;
  // The next event and the serial of the session it came from, or nullopt once `deadline`
  // passes or the queue is stopped.
  std::optional<std::pair<ZooKeeperEvent, uint64_t>> Next(
      std::chrono::steady_clock::time_point deadline);

 private:
  mutable Mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<ZooKeeperEvent, uint64_t>> events_ BM_GUARDED_BY(mutex_);
  bool stopped_ BM_GUARDED_BY(mutex_) = false;
};

}  // namespace bm
