#include "common/zookeeper/zookeeper_session.h"

#include <spdlog/spdlog.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>

#include "common/core/log_rate_limiter.h"

namespace bm {
namespace {

// Bounds what Get reads: blockmgr's znodes hold a few hundred bytes of JSON.
constexpr int kMaxNodeData = 16 * 1024;

Status StatusOf(int rc, const std::string& what) {
  if (rc == ZOK) return Status::Ok();
  std::string message = what + ": " + zerror(rc);
  switch (rc) {
    case ZNONODE:
      return NotFoundError(message);
    case ZNODEEXISTS:
    case ZBADVERSION:
    case ZNOTEMPTY:
      return AbortedError(message);
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
    case ZCLOSING:
    case ZNOTHING:
      return UnavailableError(message);
    default:
      return InternalError(message);
  }
}

// The C client's own log lines, written through a LogRateLimiter (SetZooKeeperClientLog). The
// C client calls Write from its threads, and from a caller's inside its calls, with no context
// pointer: hence one per process. Write never waits: a line that finds another being written
// is counted into the next one written instead. Thread-safe.
class ClientLog {
 public:
  void Set(spdlog::level::level_enum level, Duration interval) {
    std::lock_guard<std::mutex> lock(mutex_);
    level_ = level;
    limiter_.emplace(interval);
  }

  void Write(const char* message) {
    // A plain std::mutex, for its try_lock: bm::Mutex only waits.
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      contended_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const std::optional<uint64_t> held_back = limiter_->Admit(std::chrono::steady_clock::now());
    if (!held_back) return;
    const uint64_t more = *held_back + contended_.exchange(0, std::memory_order_relaxed);
    // "2026-12-04 10:41:07,123:4242(0x7f..):ZOO_ERROR@handle_socket_error_msg@1290: Socket ..."
    // without the time and thread, which the logger writes its own way.
    const char* from_level = std::strstr(message, "ZOO_");
    const std::string_view line(from_level != nullptr ? from_level : message);
    if (more > 0) {
      spdlog::log(level_, "zookeeper client: {} ({} more lines of the ZooKeeper client held back)",
                  line, more);
    } else {
      spdlog::log(level_, "zookeeper client: {}", line);
    }
  }

 private:
  std::mutex mutex_;
  spdlog::level::level_enum level_ = spdlog::level::warn;                      // guarded by mutex_
  std::optional<LogRateLimiter> limiter_{LogRateLimiter(kClientLogInterval)};  // by mutex_
  std::atomic<uint64_t> contended_{0};
};

ClientLog& TheClientLog() {
  static ClientLog log;
  return log;
}

void LogFromClient(const char* message) { TheClientLog().Write(message); }

// A chroot as ZooKeeper takes a path (its PathUtils.validatePath): absolute, no trailing slash,
// no empty, "." or ".." segment, no control characters. Empty (ZooKeeper's root) is fine. The
// reason why not, or empty.
std::string ChrootProblem(const std::string& chroot) {
  if (chroot.empty()) return "";
  if (chroot.front() != '/') return "it must start with /";
  if (chroot.back() == '/') return "it must not end with /";
  for (const char c : chroot) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "it holds a control character";
  }
  for (size_t start = 1; start <= chroot.size();) {
    size_t slash = chroot.find('/', start);
    if (slash == std::string::npos) slash = chroot.size();
    const std::string_view segment(chroot.data() + start, slash - start);
    if (segment.empty()) return "it has an empty segment (//)";
    if (segment == "." || segment == "..") return "it has a '" + std::string(segment) + "' segment";
    start = slash + 1;
  }
  return "";
}

// One server of the host list: "host:port", the port 1..65535. The reason why not, or empty.
std::string ServerProblem(std::string_view server) {
  const size_t colon = server.rfind(':');
  if (colon == std::string_view::npos) return "it has no :port";
  if (colon == 0) return "it has no host";
  const std::string_view port = server.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != port.npos) {
    return "its port must be a number from 1 to 65535";
  }
  const int number = std::stoi(std::string(port));
  if (number < 1 || number > 65535) return "its port must be a number from 1 to 65535";
  if (server.find_first_of(" \t") != server.npos) return "it holds a space";
  return "";
}

ZooKeeperEvent::Kind KindOf(int type) {
  if (type == ZOO_SESSION_EVENT) return ZooKeeperEvent::Kind::kSession;
  if (type == ZOO_CREATED_EVENT) return ZooKeeperEvent::Kind::kCreated;
  if (type == ZOO_DELETED_EVENT) return ZooKeeperEvent::Kind::kDeleted;
  if (type == ZOO_CHANGED_EVENT) return ZooKeeperEvent::Kind::kDataChanged;
  if (type == ZOO_CHILD_EVENT) return ZooKeeperEvent::Kind::kChildrenChanged;
  return ZooKeeperEvent::Kind::kOther;
}

}  // namespace

void SetZooKeeperClientLog(spdlog::level::level_enum level, Duration interval) {
  TheClientLog().Set(level, interval);
}

Result<ZooKeeperAddress> ParseZooKeeperAddress(const std::string& connect) {
  ZooKeeperAddress address;
  const size_t slash = connect.find('/');
  address.hosts = connect.substr(0, slash);
  if (slash != std::string::npos) {
    address.chroot = connect.substr(slash);
    if (address.chroot == "/") address.chroot.clear();  // "host:port/" names ZooKeeper's root
  }
  const std::string quoted = "ZooKeeper address '" + connect.substr(0, 200) + "'";
  if (address.hosts.empty()) return InvalidArgumentError(quoted + " names no host");
  for (size_t start = 0;;) {
    const size_t comma = address.hosts.find(',', start);
    const std::string_view server =
        std::string_view(address.hosts)
            .substr(start, comma == std::string::npos ? comma : comma - start);
    if (std::string problem = ServerProblem(server); !problem.empty()) {
      return InvalidArgumentError(quoted + ": each server must be HOST:PORT, and '" +
                                  std::string(server.substr(0, 100)) + "' is not: " + problem);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (std::string problem = ChrootProblem(address.chroot); !problem.empty()) {
    return InvalidArgumentError(quoted + ": the chroot '" + address.chroot.substr(0, 100) +
                                "' is not a ZooKeeper path like /a/b: " + problem);
  }
  return address;
}

const char* ZooKeeperStateName(ZooKeeperState state) {
  switch (state) {
    case ZooKeeperState::kConnecting:
      return "connecting";
    case ZooKeeperState::kConnected:
      return "connected";
    case ZooKeeperState::kExpired:
      return "expired";
  }
  return "?";
}

ZooKeeperSession::ZooKeeperSession(ZooKeeperAddress address, EventHandler on_event)
    : address_(std::move(address)), on_event_(std::move(on_event)) {}

Result<std::unique_ptr<ZooKeeperSession>> ZooKeeperSession::Open(
    const ZooKeeperAddress& address, std::chrono::milliseconds session_timeout,
    EventHandler on_event, const std::optional<ZooKeeperSessionId>& resume) {
  std::unique_ptr<ZooKeeperSession> session(new ZooKeeperSession(address, std::move(on_event)));
  clientid_t client_id{};
  if (resume) {
    client_id.client_id = resume->id;
    std::memcpy(client_id.passwd, resume->password.data(),
                std::min(resume->password.size(), sizeof(client_id.passwd)));
  }
  // The chroot is applied here rather than by the C client, so that the session can create it.
  session->handle_ = zookeeper_init2(
      address.hosts.c_str(), &ZooKeeperSession::Watcher, static_cast<int>(session_timeout.count()),
      resume ? &client_id : nullptr, session.get(), 0, &LogFromClient);
  if (session->handle_ == nullptr) {
    return InvalidArgumentError("cannot open a ZooKeeper session to '" + address.hosts +
                                "': " + std::strerror(errno));
  }
  return session;
}

ZooKeeperSession::~ZooKeeperSession() {
  // Waits for the C client's threads, so no callback runs after this.
  if (handle_ != nullptr) zookeeper_close(handle_);
}

void ZooKeeperSession::Watcher(zhandle_t*, int type, int state, const char* path, void* context) {
  static_cast<ZooKeeperSession*>(context)->OnEvent(type, state, path);
}

void ZooKeeperSession::OnEvent(int type, int state, const char* path) {
  ZooKeeperEvent event;
  event.kind = KindOf(type);
  {
    MutexLock lock(mutex_);
    if (type == ZOO_SESSION_EVENT) {
      if (state == ZOO_CONNECTED_STATE) {
        state_ = ZooKeeperState::kConnected;
      } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
        state_ = ZooKeeperState::kExpired;
      } else if (state_ != ZooKeeperState::kExpired) {
        // Connecting, associating, read-only: not a connection a leader may act on.
        state_ = ZooKeeperState::kConnecting;
      }
      state_changed_.notify_all();
    }
    event.state = state_;
  }
  if (type != ZOO_SESSION_EVENT && path != nullptr) {
    std::string full(path);
    const std::string& root = address_.chroot;
    event.path = full.compare(0, root.size(), root) == 0 ? full.substr(root.size()) : full;
  }
  if (on_event_) on_event_(event);
}

ZooKeeperState ZooKeeperSession::state() const {
  MutexLock lock(mutex_);
  return state_;
}

bool ZooKeeperSession::WaitConnected(std::chrono::steady_clock::time_point deadline) const {
  MutexLock lock(mutex_);
  while (state_ == ZooKeeperState::kConnecting) {
    if (!lock.WaitUntil(state_changed_, deadline)) break;
  }
  return state_ == ZooKeeperState::kConnected;
}

ZooKeeperSessionId ZooKeeperSession::id() const {
  const clientid_t* client_id = zoo_client_id(handle_);
  return {client_id->client_id, std::string(client_id->passwd, sizeof(client_id->passwd))};
}

std::chrono::milliseconds ZooKeeperSession::negotiated_timeout() const {
  return std::chrono::milliseconds(zoo_recv_timeout(handle_));
}

std::string ZooKeeperSession::FullPath(const std::string& path) const {
  std::string full = address_.chroot + path;
  return full.empty() ? "/" : full;
}

Status ZooKeeperSession::EnsurePath(const std::string& path) {
  std::string full = FullPath(path);
  // Each prefix in turn; "exists" is success (another process may create the same one).
  for (size_t end = full.find('/', 1);; end = full.find('/', end + 1)) {
    std::string prefix = full.substr(0, end);
    if (prefix != "/") {
      int rc = zoo_create(handle_, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                          ZOO_PERSISTENT, nullptr, 0);
      if (rc != ZOK && rc != ZNODEEXISTS) return StatusOf(rc, "create " + prefix);
    }
    if (end == std::string::npos) break;
  }
  return Status::Ok();
}

Result<std::string> ZooKeeperSession::Create(const std::string& path, const std::string& data,
                                             bool ephemeral, bool sequential) {
  int mode = ephemeral ? (sequential ? ZOO_EPHEMERAL_SEQUENTIAL : ZOO_EPHEMERAL)
                       : (sequential ? ZOO_PERSISTENT_SEQUENTIAL : ZOO_PERSISTENT);
  std::string full = FullPath(path);
  std::vector<char> created(full.size() + 32);
  int rc = zoo_create(handle_, full.c_str(), data.data(), static_cast<int>(data.size()),
                      &ZOO_OPEN_ACL_UNSAFE, mode, created.data(), static_cast<int>(created.size()));
  BM_RETURN_IF_ERROR(StatusOf(rc, "create " + full));
  return std::string(created.data()).substr(address_.chroot.size());
}

Result<ZooKeeperNode> ZooKeeperSession::Get(const std::string& path, bool watch) {
  std::string full = FullPath(path);
  std::vector<char> buffer(kMaxNodeData);
  int length = static_cast<int>(buffer.size());
  struct Stat stat {};
  int rc = zoo_get(handle_, full.c_str(), watch ? 1 : 0, buffer.data(), &length, &stat);
  BM_RETURN_IF_ERROR(StatusOf(rc, "get " + full));
  if (stat.dataLength > kMaxNodeData) {
    return TooLargeError("znode " + full + " holds " + std::to_string(stat.dataLength) +
                         " bytes, more than blockmgr ever writes");
  }
  ZooKeeperNode node;
  node.data.assign(buffer.data(), length > 0 ? length : 0);
  node.version = stat.version;
  node.ephemeral_owner = stat.ephemeralOwner;
  return node;
}

Result<bool> ZooKeeperSession::Exists(const std::string& path, bool watch) {
  std::string full = FullPath(path);
  struct Stat stat {};
  int rc = zoo_exists(handle_, full.c_str(), watch ? 1 : 0, &stat);
  if (rc == ZNONODE) return false;
  BM_RETURN_IF_ERROR(StatusOf(rc, "exists " + full));
  return true;
}

Result<std::vector<std::string>> ZooKeeperSession::Children(const std::string& path) {
  std::string full = FullPath(path);
  String_vector children{};
  int rc = zoo_get_children(handle_, full.c_str(), 0, &children);
  BM_RETURN_IF_ERROR(StatusOf(rc, "list " + full));
  std::vector<std::string> names(children.data, children.data + children.count);
  deallocate_String_vector(&children);
  return names;
}

Status ZooKeeperSession::Delete(const std::string& path, int32_t version) {
  std::string full = FullPath(path);
  return StatusOf(zoo_delete(handle_, full.c_str(), version), "delete " + full);
}

Status ZooKeeperSession::Multi(const std::vector<ZooKeeperOp>& ops) {
  // The C structures point into these strings and buffers, which outlive the call.
  std::vector<std::string> paths;
  paths.reserve(ops.size());
  std::vector<std::vector<char>> created(ops.size());
  std::vector<struct Stat> stats(ops.size());
  std::vector<zoo_op_t> c_ops(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const ZooKeeperOp& op = ops[i];
    paths.push_back(FullPath(op.path));
    const char* path = paths.back().c_str();
    switch (op.kind) {
      case ZooKeeperOp::Kind::kCreate:
        created[i].resize(paths.back().size() + 32);
        zoo_create_op_init(&c_ops[i], path, op.data.data(), static_cast<int>(op.data.size()),
                           &ZOO_OPEN_ACL_UNSAFE, op.ephemeral ? ZOO_EPHEMERAL : ZOO_PERSISTENT,
                           created[i].data(), static_cast<int>(created[i].size()));
        break;
      case ZooKeeperOp::Kind::kSetData:
        zoo_set_op_init(&c_ops[i], path, op.data.data(), static_cast<int>(op.data.size()),
                        op.version, &stats[i]);
        break;
      case ZooKeeperOp::Kind::kDelete:
        zoo_delete_op_init(&c_ops[i], path, op.version);
        break;
      case ZooKeeperOp::Kind::kCheck:
        zoo_check_op_init(&c_ops[i], path, op.version);
        break;
    }
  }
  std::vector<zoo_op_result_t> results(ops.size());
  int rc = zoo_multi(handle_, static_cast<int>(c_ops.size()), c_ops.data(), results.data());
  if (rc == ZOK) return Status::Ok();
  // Name the step that failed: the others report ZOK or ZRUNTIMEINCONSISTENCY.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (results[i].err != ZOK && results[i].err != ZRUNTIMEINCONSISTENCY) {
      return StatusOf(results[i].err, "multi step " + std::to_string(i) + " on " + paths[i]);
    }
  }
  return StatusOf(rc, "multi");
}

void ZooKeeperEventQueue::Push(ZooKeeperEvent event, uint64_t session_serial) {
  MutexLock lock(mutex_);
  if (stopped_) return;
  events_.emplace_back(std::move(event), session_serial);
  changed_.notify_all();
}

void ZooKeeperEventQueue::Stop() {
  MutexLock lock(mutex_);
  stopped_ = true;
  events_.clear();
  changed_.notify_all();
}

bool ZooKeeperEventQueue::stopped() const {
  MutexLock lock(mutex_);
  return stopped_;
}

std::optional<std::pair<ZooKeeperEvent, uint64_t>> ZooKeeperEventQueue::Next(
    std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(mutex_);
  while (events_.empty() && !stopped_) {
    if (!lock.WaitUntil(changed_, deadline)) break;
  }
  if (stopped_ || events_.empty()) return std::nullopt;
  auto event = std::move(events_.front());
  events_.pop_front();
  return event;
}

}  // namespace bm
