#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "blockmgr/status.h"

namespace bm {

// The masters a client or a worker may talk to (PROTOCOL.md, "Standby masters"): one address,
// or several separated by commas ("tcp://a:7700,tcp://b:7700"), of which one leads. It starts
// with the first, goes where a standby's notLeader says the leader is, and moves on to the
// next when the one it talks to does not answer.
//
// Not thread-safe: a value owned by one client or one worker's master link.
class MasterAddresses {
 public:
  // kInvalidArgument for an empty list or an empty entry.
  static Result<MasterAddresses> Parse(std::string_view list);
  // Whether every entry of `list` is an endpoint a client can connect to: tcp://HOST:PORT (a
  // port from 1 to 65535, no wildcard), ipc://PATH or inproc://NAME; the flag checks of bmctl
  // and the examples, so a typo is reported before anything waits on a master.
  static Status ValidateConnectable(std::string_view list);

  const std::string& current() const { return addresses_[current_]; }
  // More than one master known: failing over between them is worth a try.
  bool several() const { return addresses_.size() > 1; }
  const std::vector<std::string>& all() const { return addresses_; }

  // A master said `leader` leads: talk to it next. An address not listed yet is added (a
  // leader elected through ZooKeeper need not be in the list the caller was given). Returns
  // false when it is the current one already (it said so itself: nothing new).
  bool FollowHint(const std::string& leader);
  // The current master did not answer: the next one, round the list.
  void Rotate() { current_ = (current_ + 1) % addresses_.size(); }
  // "tcp://a:7700,tcp://b:7700", for messages.
  std::string ToString() const;

 private:
  explicit MasterAddresses(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}

  std::vector<std::string> addresses_;  // never empty
  size_t current_ = 0;
};

}  // namespace bm
