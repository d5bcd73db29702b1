#pragma once

// The benchmark of issue 5: each workload run side by side with its peers in one run.

#include <cstdint>
#include <set>
#include <vector>

#include "bench/report.h"
#include "bench/servers.h"

namespace bm::bench {

struct BenchConfig {
  BenchEnv env;
  // Seconds each timed measurement runs (at least; see Duration).
  double seconds = 2;
  // Each side-by-side measurement runs this many times, blockmgr and peers taking turns; the
  // report gives medians.
  int rounds = 3;
  // Size of workload 6's single DISK_ONLY block; 0 skips workload 6.
  uint64_t big_block_bytes = 3ull << 30;
  // Blocks registered with the master in workload 5, in increasing order.
  std::vector<uint64_t> master_blocks = {1'000'000, 10'000'000};
  // Values db_bench writes and reads in workload 4.
  uint64_t db_bench_values = 1000;
  // A bm-worker of another build that workload 10 measures too; empty = none.
  std::string baseline_worker;
  // The bin directory of a build from before block digests (bm-master, bm-worker, bm-bench)
  // that workload 11 measures side by side; empty = workload 11 is skipped.
  std::string baseline_bin_dir;
  // Which workloads to run (0 = memcpy); empty = all.
  std::set<int> only;
};

// Runs the selected workloads, starting and stopping every server they need. A workload whose
// server or peer cannot run yields rows without that figure and a note saying why.
Report RunBenchmark(const BenchConfig& config);

}  // namespace bm::bench
