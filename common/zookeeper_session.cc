#include "common/zookeeper_session.h"

#include <spdlog/spdlog.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

// The C client writes its log through this (it has no context pointer, hence a free function):
// connection attempts and losses are routine while ZooKeeper is away, so only its errors are
// shown at warn level.
void LogFromClient(const char* message) {
  if (std::strstr(message, "ZOO_ERROR") != nullptr) {
    spdlog::warn("zookeeper: {}", message);
  } else {
    spdlog::debug("zookeeper: {}", message);
  }
}

bool ValidChroot(const std::string& chroot) {
  if (chroot.empty()) return true;
  if (chroot.front() != '/' || chroot.back() == '/') return false;
  return chroot.find("//") == std::string::npos;
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

Result<ZooKeeperAddress> ParseZooKeeperAddress(const std::string& connect) {
  ZooKeeperAddress address;
  size_t slash = connect.find('/');
  address.hosts = connect.substr(0, slash);
  if (slash != std::string::npos) {
    address.chroot = connect.substr(slash);
    if (address.chroot == "/") address.chroot.clear();  // "host:port/" names ZooKeeper's root
  }
  if (address.hosts.empty()) {
    return InvalidArgumentError("ZooKeeper address '" + connect + "' names no host");
  }
  size_t start = 0;
  while (start <= address.hosts.size()) {
    size_t comma = address.hosts.find(',', start);
    std::string host = address.hosts.substr(start, comma - start);
    size_t colon = host.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == host.size() ||
        host.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      return InvalidArgumentError("ZooKeeper address '" + connect +
                                  "': each server must be host:port, not '" + host + "'");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!ValidChroot(address.chroot)) {
    return InvalidArgumentError("ZooKeeper address '" + connect +
                                "': the chroot must look like /a/b");
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
