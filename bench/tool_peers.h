#pragma once

// Peers measured by their own benchmark tools: iperf3 (TCP over loopback) and RocksDB's
// db_bench (the store under blockmgr's disk tier).

#include <cstdint>

#include "bench/servers.h"
#include "blockmgr/status.h"

namespace bm::bench {

// One iperf3 TCP stream to 127.0.0.1 for `seconds`; bytes per second received.
Result<double> RunIperf(const BenchEnv& env, double seconds);

struct RedisTlsRates {
  double set_bytes_per_s = 0;
  double get_bytes_per_s = 0;
};

// Redis over TLS: redis-server serving only --tls-port with a self-signed certificate that
// openssl makes in the work directory, measured by redis-benchmark --tls (one connection, no
// pipelining): `requests` SETs then GETs of `size`-byte values.
Result<RedisTlsRates> RunRedisTls(const BenchEnv& env, uint64_t size, int requests);

struct DbBenchRates {
  double fillseq_bytes_per_s = 0;
  double readrandom_bytes_per_s = 0;
};

// db_bench fillseq then readrandom of `num` values of `value_size` bytes, uncompressed (as
// blockmgr's disk store keeps them), in a fresh database under the work directory.
Result<DbBenchRates> RunDbBench(const BenchEnv& env, uint64_t value_size, uint64_t num);

}  // namespace bm::bench
