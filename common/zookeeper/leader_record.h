#pragma once

// The znodes through which bm-masters elect a leader and everyone else finds it
// (schema/PROTOCOL.md, "Leader election"). Paths are relative to the cluster's chroot.

#include <cstdint>
#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm {

// Persistent; one EPHEMERAL|SEQUENCE child per running master, holding a CandidateRecord.
inline constexpr char kCandidatesZnode[] = "/candidates";
// Ephemeral, owned by the leader's session; holds a LeaderRecord.
inline constexpr char kLeaderZnode[] = "/leader";
// Persistent; the epoch of the latest leader as decimal text. Only ever grows: each claim
// writes it at the version it read, in the same multi that creates kLeaderZnode.
inline constexpr char kEpochZnode[] = "/epoch";

// Persistent; holds an InSyncRecord: who may lead next without losing anything acknowledged.
// The leader rewrites it (conditional on /epoch) whenever its set of in-sync standbys changes,
// before it acknowledges anything without a standby it drops.
inline constexpr char kInSyncZnode[] = "/in_sync";

// The masters that hold every record the leader of `epoch` acknowledged: the leader itself
// and its in-sync standbys. Only they may claim the next epoch.
struct InSyncRecord {
  uint64_t epoch = 0;
  std::string leader;
  std::vector<std::string> standbys;

  bool Eligible(const std::string& id) const;
  bool operator==(const InSyncRecord&) const = default;
};
// {"epoch":3,"leader":"master-a","in_sync":["master-b"]}
std::string EncodeInSyncRecord(const InSyncRecord& record);
// kInvalidArgument for anything but the JSON above with a non-empty leader.
Result<InSyncRecord> ParseInSyncRecord(const std::string& data);

// Who leads, where its clients reach it, and the epoch that fences its predecessors.
struct LeaderRecord {
  std::string id;
  std::string address;
  uint64_t epoch = 0;

  bool operator==(const LeaderRecord&) const = default;
};

// {"id":"master-a","address":"tcp://10.0.0.1:7700","epoch":3}
std::string EncodeLeaderRecord(const LeaderRecord& record);
// kInvalidArgument for anything but the JSON above with a non-empty id and an epoch >= 1.
Result<LeaderRecord> ParseLeaderRecord(const std::string& data);

// A master standing in the election: a child of kCandidatesZnode, named
// "c_<session id in hex>_<10-digit sequence>", in line by the sequence.
struct CandidateRecord {
  std::string id;
  std::string address;

  bool operator==(const CandidateRecord&) const = default;
};
// {"id":"master-a","address":"tcp://10.0.0.1:7700"}
std::string EncodeCandidateRecord(const std::string& id, const std::string& address);
// kInvalidArgument for anything but the JSON above with a non-empty id.
Result<CandidateRecord> ParseCandidateRecord(const std::string& data);
// The sequence number ZooKeeper appended to a candidate znode's name (its last 10 digits), or
// -1 for a name that has none.
int64_t CandidateSequence(const std::string& name);

// The epoch znode's text: decimal digits only. kInvalidArgument otherwise.
Result<uint64_t> ParseEpoch(const std::string& data);

}  // namespace bm
