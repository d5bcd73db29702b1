#pragma once

// The transport of same-host reads (schema/local_reads.capnp): a Unix domain socket of type
// SOCK_SEQPACKET, so each message is one packet and message boundaries need no framing, and a
// packet may carry one descriptor (SCM_RIGHTS).

#include <capnp/common.h>
#include <kj/array.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"

namespace capnp {
class MessageBuilder;
}  // namespace capnp

namespace bm {

// Largest packet either side sends or accepts: a reply with a block carried inline (at most
// kMaxInlineBlockBytes) and its digests fits.
inline constexpr size_t kMaxLocalPacketBytes = 96 * 1024;

// A descriptor that closes itself.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd() { Reset(); }
  OwnedFd(OwnedFd&& other) noexcept : fd_(other.Release()) {}
  OwnedFd& operator=(OwnedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.Release();
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// Listens on `path` (replacing a stale socket file a killed process left), non-blocking, with
// mode 0600: only the owner (and root) may connect. kUnavailable when it cannot.
Result<OwnedFd> ListenLocal(const std::string& path);
// Connects to `path`; kUnavailable when nothing listens there.
Result<OwnedFd> ConnectLocal(const std::string& path);

// One received packet: the word-aligned Cap'n Proto message it starts with (read in place),
// the bytes that follow the message (its trailer: small blocks' bytes, see
// LocalBlock.inTrailer), and the descriptor it carried, if any.
struct LocalPacket {
  kj::Array<capnp::word> words;
  ChunkPtr trailer;  // null when nothing follows the message
  OwnedFd fd;
};

// Sends one packet, with `fd` attached when it is >= 0. `wait`: block until there is room
// (a client); otherwise kOutOfSpace when the peer's queue is full (the worker's loop never
// waits on a reader). kUnavailable when the peer is gone.
Status SendPacket(int socket, std::span<const std::byte> bytes, int fd, bool wait);
// As SendPacket, the packet gathered from `parts` in order (no copy into one buffer first).
Status SendPacket(int socket, std::span<const std::span<const std::byte>> parts, int fd, bool wait);
// The parts of `message` in flat-array form (segment table, then segments), into `table`
// (which must outlive the parts) and `parts`, for a gathered SendPacket with no copy.
void MessageParts(capnp::MessageBuilder& message, std::vector<uint32_t>& table,
                  std::vector<std::span<const std::byte>>& parts);
// Receives one packet, waiting up to `timeout` (zero: only what is queued). kNotFound when
// nothing arrived in time, kUnavailable when the peer closed or the socket failed,
// kInvalidArgument for a packet over kMaxLocalPacketBytes, not a whole number of words, or with
// more than one descriptor (the extra ones are closed).
Result<LocalPacket> ReceivePacket(int socket, std::chrono::milliseconds timeout);
// Up to kMaxQueuedPacketsPerReceive packets already queued, in one system call (recvmmsg): a
// server reading one request per wake-up learns that no second one is queued without a second
// call. kNotFound when none is queued, kUnavailable when the socket failed. Each packet's
// verdict as ReceivePacket's; the peer's end shows as kUnavailable in its place.
inline constexpr size_t kMaxQueuedPacketsPerReceive = 16;
Result<std::vector<Result<LocalPacket>>> ReceiveQueuedPackets(int socket);
// As ReceivePacket, waiting in the receive itself (one system call) for as long as the socket's
// SO_RCVTIMEO allows; kNotFound when that passed.
Result<LocalPacket> ReceivePacketWaiting(int socket);
// Sets SO_RCVTIMEO.
Status SetReceiveTimeout(int socket, std::chrono::milliseconds timeout);

// The uid and pid of the process at the other end (SO_PEERCRED); the pid is 0 when that
// process is in a PID namespace this one cannot see.
Result<uid_t> PeerUid(int socket);
Result<pid_t> PeerPid(int socket);
// True when process `pid` is gone, stopped (SIGSTOP, a debugger) or a zombie: a peer that will
// not answer however long one waits. False when it runs, or cannot be told (pid 0).
bool ProcessHalted(pid_t pid);

}  // namespace bm
