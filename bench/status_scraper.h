#pragma once

// The load of people and Prometheus watching a cluster: GETs of status pages at a fixed rate,
// for the benchmark row that checks HTTP does not slow block traffic.

#include <string>
#include <vector>

#include "blockmgr/status.h"

namespace bm::bench {

// GETs every URL ("http://127.0.0.1:PORT/path") `rounds_per_second` times a second until
// killed, printing "scraping" once the first round answered. Returns only on a failed round.
Status RunStatusScraper(const std::vector<std::string>& urls, double rounds_per_second);

}  // namespace bm::bench
