#pragma once

// What the client's shuffle calls, writers (client/shuffle.cc) and readers
// (client/shuffle_reader.cc) share: the master's layout of a shuffle and how errors name things.
// Internal to the client library.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "blockmgr/shuffle.h"
#include "blockmgr/status.h"

namespace bm {

class MasterClient;

// "shuffle 7".
std::string ShuffleName(uint64_t shuffle_id);
// The master's layout of the shuffle (checked for consistency), with the commits of
// `commits_of_partition` when asked for.
Result<ShuffleLayout> GetShuffleLayout(MasterClient& master, uint64_t shuffle_id,
                                       std::optional<uint32_t> commits_of_partition);
// "3, 7, 9", or the first 16 and how many in all.
std::string ShuffleMapList(const std::vector<uint32_t>& maps);

}  // namespace bm
