#pragma once

#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm::testing {

// A cluster's keypairs in `dir` (created if missing), which is also its allow-list: one for the
// master (shared by standby masters), `admin` (role admin), `client` (role client), and one per
// worker id (a worker key names its worker).
Status GenerateClusterKeys(const std::string& dir, const std::vector<std::string>& worker_ids);

}  // namespace bm::testing
