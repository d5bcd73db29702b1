#include "bench/tool_peers.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace bm::bench {

Result<double> RunIperf(const BenchEnv& env, double seconds) {
  BM_ASSIGN_OR_RETURN(PeerServer server, StartIperfServer(env));
  const std::string iperf = testing::FindOnPath("iperf3");
  BM_ASSIGN_OR_RETURN(
      testing::CommandResult run,
      testing::RunCommand(testing::Command{
          .binary = iperf,
          .args = {"-c", "127.0.0.1", "-p", std::to_string(server.port), "-t",
                   std::to_string(std::max(1, static_cast<int>(seconds + 0.5))), "-J"},
          .stderr_log = env.work_dir + "/iperf3-client.log",
          .timeout = std::chrono::milliseconds(static_cast<int>(seconds * 1000) + 30000)}));
  if (run.exit_code != 0)
    return InternalError("iperf3 client exited " + std::to_string(run.exit_code));
  nlohmann::json report = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) return InternalError("iperf3 printed no JSON");
  try {
    return report.at("end").at("sum_received").at("bits_per_second").get<double>() / 8;
  } catch (const nlohmann::json::exception& e) {
    return InternalError(std::string("iperf3 JSON without a received rate: ") + e.what());
  }
}

Result<RedisTlsRates> RunRedisTls(const BenchEnv& env, uint64_t size, int requests) {
  const std::string openssl = testing::FindOnPath("openssl");
  const std::string benchmark = testing::FindOnPath("redis-benchmark");
  if (openssl.empty() || benchmark.empty()) {
    return UnavailableError("openssl or redis-benchmark not found (Debian openssl, redis-tools)");
  }
  const std::string cert = env.work_dir + "/redis-tls.crt";
  const std::string key = env.work_dir + "/redis-tls.key";
  BM_ASSIGN_OR_RETURN(testing::CommandResult made,
                      testing::RunCommand(testing::Command{
                          .binary = openssl,
                          .args = {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                                   "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"},
                          .stderr_log = env.work_dir + "/openssl.log",
                          .timeout = std::chrono::minutes(1)}));
  if (made.exit_code != 0) return InternalError("openssl could not make a certificate");
  BM_ASSIGN_OR_RETURN(PeerServer server, StartRedisTls(env, cert, key));
  BM_ASSIGN_OR_RETURN(testing::CommandResult run,
                      testing::RunCommand(testing::Command{
                          .binary = benchmark,
                          .args = {"-h", "127.0.0.1", "-p", std::to_string(server.port), "--tls",
                                   "--cacert", cert, "-c", "1", "-n", std::to_string(requests),
                                   "-d", std::to_string(size), "-t", "set,get", "--csv"},
                          .stderr_log = env.work_dir + "/redis-benchmark.log",
                          .timeout = std::chrono::minutes(5)}));
  if (run.exit_code != 0) {
    return InternalError("redis-benchmark exited " + std::to_string(run.exit_code) + "; see " +
                         env.work_dir + "/redis-benchmark.log");
  }
  // CSV lines like "SET","123.45",... (requests per second).
  const std::regex line(R"re(^"(SET|GET)","([0-9.]+)")re");
  RedisTlsRates rates;
  std::istringstream lines(run.out);
  std::string text;
  while (std::getline(lines, text)) {
    std::smatch match;
    if (!std::regex_search(text, match, line)) continue;
    const double bytes_per_s = std::stod(match[2].str()) * static_cast<double>(size);
    if (match[1] == "SET") rates.set_bytes_per_s = bytes_per_s;
    if (match[1] == "GET") rates.get_bytes_per_s = bytes_per_s;
  }
  if (rates.set_bytes_per_s == 0 || rates.get_bytes_per_s == 0) {
    return InternalError("could not read redis-benchmark's results: " + run.out.substr(0, 300));
  }
  return rates;
}

Result<DbBenchRates> RunDbBench(const BenchEnv& env, uint64_t value_size, uint64_t num) {
  std::string binary = testing::FindOnPath("db_bench");
  if (binary.empty()) binary = testing::FindOnPath("rocksdb_db_bench");
  if (binary.empty()) return UnavailableError("db_bench not found (Debian package rocksdb-tools)");
  const std::string db = env.work_dir + "/db_bench-db";
  std::filesystem::remove_all(db);
  BM_ASSIGN_OR_RETURN(testing::CommandResult run,
                      testing::RunCommand(testing::Command{
                          .binary = binary,
                          .args = {"--db=" + db, "--benchmarks=fillseq,readrandom",
                                   "--value_size=" + std::to_string(value_size),
                                   "--num=" + std::to_string(num), "--reads=" + std::to_string(num),
                                   "--compression_type=none", "--threads=1", "--use_existing_db=0"},
                          .stderr_log = env.work_dir + "/db_bench.log",
                          .timeout = std::chrono::minutes(10)}));
  std::filesystem::remove_all(db);
  if (run.exit_code != 0) {
    return InternalError("db_bench exited " + std::to_string(run.exit_code) + "; see " +
                         env.work_dir + "/db_bench.log");
  }
  // Lines like "fillseq      :    3012.345 micros/op 331 ops/sec 3.012 seconds ...".
  const std::regex line(R"(^(\w+)\s*:\s*([0-9.]+) micros/op)");
  DbBenchRates rates;
  std::istringstream lines(run.out);
  std::string text;
  while (std::getline(lines, text)) {
    std::smatch match;
    if (!std::regex_search(text, match, line)) continue;
    const double micros = std::stod(match[2].str());
    if (micros <= 0) continue;
    const double bytes_per_s = 1e6 / micros * static_cast<double>(value_size);
    if (match[1] == "fillseq") rates.fillseq_bytes_per_s = bytes_per_s;
    if (match[1] == "readrandom") rates.readrandom_bytes_per_s = bytes_per_s;
  }
  if (rates.fillseq_bytes_per_s == 0 || rates.readrandom_bytes_per_s == 0) {
    return InternalError("could not read db_bench's results: " + run.out.substr(0, 500));
  }
  return rates;
}

}  // namespace bm::bench
