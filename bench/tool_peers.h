#pragma once

// Peers measured by their own benchmark tools: iperf3 (TCP over loopback) and RocksDB's
// db_bench (the store under blockmgr's disk tier).

#include <cstdint>

#include "bench/servers.h"
#include "common/status.h"

namespace bm::bench {

// One iperf3 TCP stream to 127.0.0.1 for `seconds`; bytes per second received.
Result<double> RunIperf(const BenchEnv& env, double seconds);

struct DbBenchRates {
  double fillseq_bytes_per_s = 0;
  double readrandom_bytes_per_s = 0;
};

// db_bench fillseq then readrandom of `num` values of `value_size` bytes, uncompressed (as
// blockmgr's disk store keeps them), in a fresh database under the work directory.
Result<DbBenchRates> RunDbBench(const BenchEnv& env, uint64_t value_size, uint64_t num);

}  // namespace bm::bench
