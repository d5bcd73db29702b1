#include "bench/tool_peers.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace bm::bench {

Result<double> RunIperf(const BenchEnv& env, double seconds) {
  ASSIGN_OR_RETURN(PeerServer server, StartIperfServer(env));
  const std::string iperf = FindOnPath("iperf3");
  ASSIGN_OR_RETURN(
      CommandOutput run,
      RunCommand(iperf,
                 {"-c", "127.0.0.1", "-p", std::to_string(server.port), "-t",
                  std::to_string(std::max(1, static_cast<int>(seconds + 0.5))), "-J"},
                 env.work_dir + "/iperf3-client.log",
                 std::chrono::milliseconds(static_cast<int>(seconds * 1000) + 30000)));
  if (run.exit_code != 0) return InternalError("iperf3 client exited " + std::to_string(run.exit_code));
  nlohmann::json report = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  if (report.is_discarded()) return InternalError("iperf3 printed no JSON");
  try {
    return report.at("end").at("sum_received").at("bits_per_second").get<double>() / 8;
  } catch (const nlohmann::json::exception& e) {
    return InternalError(std::string("iperf3 JSON without a received rate: ") + e.what());
  }
}

Result<DbBenchRates> RunDbBench(const BenchEnv& env, uint64_t value_size, uint64_t num) {
  std::string binary = FindOnPath("db_bench");
  if (binary.empty()) binary = FindOnPath("rocksdb_db_bench");
  if (binary.empty()) return UnavailableError("db_bench not found (Debian package rocksdb-tools)");
  const std::string db = env.work_dir + "/db_bench-db";
  std::filesystem::remove_all(db);
  ASSIGN_OR_RETURN(
      CommandOutput run,
      RunCommand(binary,
                 {"--db=" + db, "--benchmarks=fillseq,readrandom",
                  "--value_size=" + std::to_string(value_size), "--num=" + std::to_string(num),
                  "--reads=" + std::to_string(num), "--compression_type=none", "--threads=1",
                  "--use_existing_db=0"},
                 env.work_dir + "/db_bench.log", std::chrono::minutes(10)));
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
