#pragma once

#include <string>

#include "master/cluster_snapshot.h"

namespace bm {

// The master's /metrics page (Prometheus text format) from a snapshot.
std::string MasterMetricsText(const ClusterSnapshot& snapshot);

}  // namespace bm
