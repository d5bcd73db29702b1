#include "common/net/local_socket.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace bm {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return InvalidArgumentError("socket path '" + path + "' is empty or longer than " +
                                std::to_string(sizeof(address.sun_path) - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

}  // namespace

void OwnedFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Result<OwnedFd> ListenLocal(const std::string& path) {
  BM_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  OwnedFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return UnavailableError(Errno("socket"));
  // A socket file left by a killed worker: the disk store's lock already makes sure no live
  // worker uses this directory.
  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0 && S_ISSOCK(existing.st_mode)) unlink(path.c_str());
  // Created with no access for others from the start, not chmod-ed after a window. The umask
  // is the process's: one that also took the owner's execute bit would make a directory another
  // thread creates meanwhile unusable, so the socket loses its (meaningless) execute bit after.
  const mode_t old_mask = umask(0077);
  const int bound = bind(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  umask(old_mask);
  if (bound != 0) return UnavailableError(Errno("binding " + path));
  // Owner-only either way (connect needs write permission on the file): 0600, as README says.
  if (chmod(path.c_str(), 0600) != 0) return UnavailableError(Errno("chmod " + path));
  if (listen(socket.get(), 128) != 0) return UnavailableError(Errno("listening on " + path));
  return socket;
}

Result<OwnedFd> ConnectLocal(const std::string& path) {
  BM_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  OwnedFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return UnavailableError(Errno("socket"));
  if (connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return UnavailableError(Errno("connecting to " + path));
  }
  return socket;
}

Status SendPacket(int socket, std::span<const std::byte> bytes, int fd, bool wait) {
  const std::span<const std::byte> parts[] = {bytes};
  return SendPacket(socket, parts, fd, wait);
}

void MessageParts(capnp::MessageBuilder& message, std::vector<uint32_t>& table,
                  std::vector<std::span<const std::byte>>& parts) {
  // The flat-array form (capnp/serialize.h): the segment count less one, each segment's size
  // in words, padded to a whole word; then the segments.
  const kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments =
      message.getSegmentsForOutput();
  table.assign((segments.size() + 2) & ~size_t{1}, 0);
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) {
    table[i + 1] = static_cast<uint32_t>(segments[i].size());
  }
  parts.push_back(std::as_bytes(std::span(table)));
  for (const kj::ArrayPtr<const capnp::word>& segment : segments) {
    const kj::ArrayPtr<const kj::byte> bytes = segment.asBytes();
    parts.push_back(std::as_bytes(std::span(bytes.begin(), bytes.size())));
  }
}

Status SendPacket(int socket, std::span<const std::span<const std::byte>> parts, int fd,
                  bool wait) {
  constexpr size_t kMaxParts = 64;
  if (parts.size() > kMaxParts) {
    // Gathered into one buffer (never on the hot path: replies have a handful of parts).
    std::vector<std::byte> joined;
    for (std::span<const std::byte> part : parts)
      joined.insert(joined.end(), part.begin(), part.end());
    const std::span<const std::byte> one[] = {joined};
    return SendPacket(socket, one, fd, wait);
  }
  iovec io[kMaxParts];
  for (size_t i = 0; i < parts.size(); ++i) {
    io[i] = iovec{const_cast<std::byte*>(parts[i].data()), parts[i].size()};
  }
  msghdr message{};
  message.msg_iov = io;
  message.msg_iovlen = parts.size();
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  }
  const int flags = MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT);
  while (true) {
    const ssize_t sent = sendmsg(socket, &message, flags);
    if (sent >= 0) return Status::Ok();
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return OutOfSpaceError("the peer's socket queue is full");
    }
    return UnavailableError(Errno("sending on the local socket"));
  }
}

namespace {

// One recvmsg with `flags`; kNotFound when nothing came (EAGAIN: nothing queued, or the
// socket's receive timeout passed).
Result<LocalPacket> ReceiveOne(int socket, int flags);

}  // namespace

Result<LocalPacket> ReceivePacketWaiting(int socket) { return ReceiveOne(socket, 0); }

Result<LocalPacket> ReceivePacket(int socket, std::chrono::milliseconds timeout) {
  // A zero timeout reads what is queued without a poll first: a system call saved per request
  // on the worker's loop.
  while (timeout.count() > 0) {
    pollfd ready{socket, POLLIN, 0};
    const int polled = poll(&ready, 1, static_cast<int>(timeout.count()));
    if (polled > 0) break;
    if (polled == 0) return NotFoundError("no packet within the timeout");
    if (errno != EINTR) return UnavailableError(Errno("poll"));
  }
  return ReceiveOne(socket, MSG_DONTWAIT);
}

namespace {

// Room for more than one descriptor, so extra ones arrive (and are closed) rather than leak
// into MSG_CTRUNC.
constexpr size_t kControlBytes = CMSG_SPACE(4 * sizeof(int));

// The packet that arrived as `got` bytes of `data` with `message`'s control data: its
// descriptors are taken (closed unless handed on) whatever the verdict.
Result<LocalPacket> PacketFrom(std::span<const std::byte> data, size_t got, msghdr& message) {
  LocalPacket packet;
  std::vector<OwnedFd> fds;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (got > kMaxLocalPacketBytes || (message.msg_flags & MSG_TRUNC) != 0) {
    return InvalidArgumentError("a local-read packet over " + std::to_string(kMaxLocalPacketBytes) +
                                " bytes");
  }
  if (fds.size() > 1 || (message.msg_flags & MSG_CTRUNC) != 0) {
    return InvalidArgumentError("a local-read packet carried more than one descriptor");
  }
  // The message, then its trailer (the bytes after it): the message's size is in its segment
  // table. A table claiming more than arrived leaves the whole packet to the message, whose
  // reading then fails.
  size_t message_bytes = got;
  if (message_bytes >= sizeof(capnp::word)) {
    const kj::ArrayPtr<const capnp::word> prefix(reinterpret_cast<const capnp::word*>(data.data()),
                                                 message_bytes / sizeof(capnp::word));
    const size_t expected = capnp::expectedSizeInWordsFromPrefix(prefix) * sizeof(capnp::word);
    if (expected <= message_bytes) message_bytes = expected;
  }
  if (message_bytes % sizeof(capnp::word) != 0) {
    return InvalidArgumentError("a local-read packet that is not a Cap'n Proto message");
  }
  // Copied out at its size into words the message is read from in place: a get of a small
  // block must not pay for the largest packet.
  packet.words = kj::heapArray<capnp::word>(message_bytes / sizeof(capnp::word));
  std::memcpy(packet.words.begin(), data.data(), message_bytes);
  if (got > message_bytes)
    packet.trailer = MakeChunk(data.subspan(message_bytes, got - message_bytes));
  if (!fds.empty()) packet.fd = std::move(fds.front());
  return packet;
}

Result<LocalPacket> ReceiveOne(int socket, int flags) {
  // Received into a buffer kept by the thread.
  thread_local std::vector<std::byte> scratch(kMaxLocalPacketBytes + 1);
  iovec io{scratch.data(), scratch.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[kControlBytes] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = recvmsg(socket, &message, flags | MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return NotFoundError("no packet queued");
    return UnavailableError(Errno("receiving on the local socket"));
  }
  if (got == 0) return UnavailableError("the local socket's peer closed the connection");
  return PacketFrom(scratch, static_cast<size_t>(got), message);
}

}  // namespace

Result<std::vector<Result<LocalPacket>>> ReceiveQueuedPackets(int socket) {
  struct Slot {
    std::vector<std::byte> bytes = std::vector<std::byte>(kMaxLocalPacketBytes + 1);
    alignas(cmsghdr) char control[kControlBytes];
  };
  thread_local std::vector<Slot> slots(kMaxQueuedPacketsPerReceive);
  iovec io[kMaxQueuedPacketsPerReceive];
  mmsghdr messages[kMaxQueuedPacketsPerReceive] = {};
  for (size_t i = 0; i < kMaxQueuedPacketsPerReceive; ++i) {
    io[i] = iovec{slots[i].bytes.data(), slots[i].bytes.size()};
    messages[i].msg_hdr.msg_iov = &io[i];
    messages[i].msg_hdr.msg_iovlen = 1;
    messages[i].msg_hdr.msg_control = slots[i].control;
    messages[i].msg_hdr.msg_controllen = kControlBytes;
  }
  int got;
  do {
    got = recvmmsg(socket, messages, kMaxQueuedPacketsPerReceive, MSG_DONTWAIT | MSG_CMSG_CLOEXEC,
                   nullptr);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return NotFoundError("no packet queued");
    return UnavailableError(Errno("receiving on the local socket"));
  }
  std::vector<Result<LocalPacket>> packets;
  for (int i = 0; i < got; ++i) {
    // An empty packet is the peer's end (it never sends one).
    if (messages[i].msg_len == 0) {
      packets.emplace_back(UnavailableError("the local socket's peer closed the connection"));
      continue;
    }
    packets.push_back(PacketFrom(slots[i].bytes, messages[i].msg_len, messages[i].msg_hdr));
  }
  return packets;
}

namespace {

// The peer's uid and pid (SO_PEERCRED).
Result<ucred> PeerCredentials(int socket) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return UnavailableError(Errno("SO_PEERCRED"));
  }
  return credentials;
}

}  // namespace

Status SetReceiveTimeout(int socket, std::chrono::milliseconds timeout) {
  timeval value{};
  value.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  value.tv_usec = static_cast<suseconds_t>(timeout.count() % 1000 * 1000);
  if (setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value) != 0) {
    return InternalError(Errno("SO_RCVTIMEO"));
  }
  return Status::Ok();
}

Result<pid_t> PeerPid(int socket) {
  BM_ASSIGN_OR_RETURN(const ucred credentials, PeerCredentials(socket));
  return credentials.pid;
}

bool ProcessHalted(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // gone
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses; the state follows the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'T' || state == 't' || state == 'Z' || state == 'X';
}

Result<uid_t> PeerUid(int socket) {
  BM_ASSIGN_OR_RETURN(const ucred credentials, PeerCredentials(socket));
  return credentials.uid;
}

}  // namespace bm
