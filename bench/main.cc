// bm-bench: the side-by-side benchmark of blockmgr against its peers (bench/README.md).
//
//   bm-bench [--quick] [--json] ...          run the workloads, print one table (or JSON rows)
//   bm-bench --client '<task json>'          internal: one client-side measurement
//   bm-bench --serve-zmq ENDPOINT            internal: the raw ZeroMQ peer server

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>

#include "bench/proc_info.h"
#include "bench/raw_zmq.h"
#include "bench/status_scraper.h"
#include "bench/tasks.h"
#include "bench/workloads.h"
#include "common/core/allocator.h"
#include "common/core/byte_size.h"
#include "common/core/logging.h"

namespace {

// Prints {"ok": true, ...figures} or {"ok": false, "error": ...} for the parent to read.
int RunClientMode(const std::string& task_text) {
  // The task's result is the JSON line on stdout: log lines (the disk store's) go to stderr.
  bm::InitLogging("bm-bench-client", "warn");
  nlohmann::json task = nlohmann::json::parse(task_text, nullptr, /*allow_exceptions=*/false);
  bm::Result<nlohmann::json> result =
      task.is_object() ? bm::bench::RunClientTask(task)
                       : bm::Result<nlohmann::json>(bm::InvalidArgumentError("task is not JSON"));
  if (!result.ok()) {
    std::cout << nlohmann::json{{"ok", false}, {"error", result.status().ToString()}} << std::endl;
    return 1;
  }
  nlohmann::json out = *result;
  out["ok"] = true;
  std::cout << out << std::endl;
  return 0;
}

std::vector<uint64_t> ParseCounts(const std::string& text) {
  std::vector<uint64_t> counts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) counts.push_back(std::stoull(item));
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  // Every process of the benchmark, blockmgr's clients and the peers' alike, uses the allocator
  // settings blockmgr's own binaries use.
  bm::TuneAllocatorForBlockBuffers();
  CLI::App app{"bm-bench: blockmgr against raw ZeroMQ, iperf3, Redis, memcached and db_bench"};
  bool quick = false;
  bool json = false;
  double seconds = 0;
  int rounds = 0;
  std::string big_block = "3GiB";
  std::string master_blocks;
  std::string work_dir = "/tmp/bm-bench";
  std::vector<int> only;
  std::string client_task;
  std::string serve_zmq;
  uint64_t serve_bytes = 64 << 20;
  std::vector<std::string> scrape_urls;
  double scrape_hz = 20;
  std::string baseline_worker;
  std::string baseline_bin_dir;
  app.add_flag("--quick", quick,
               "A fast smoke run: short measurements, a 256 MiB big block, 1M master blocks");
  app.add_flag("--json", json, "Print the rows as a JSON list instead of a table");
  app.add_option("--seconds", seconds, "Seconds per timed measurement (default 2, quick 0.5)");
  app.add_option("--rounds", rounds,
                 "Rounds of each side-by-side measurement, medians reported (default 3, quick 1)");
  app.add_option("--big-block", big_block, "Size of workload 6's block; 0 skips it")
      ->capture_default_str();
  app.add_option("--master-blocks", master_blocks,
                 "Blocks registered in workload 5, comma separated (default 1000000,10000000)");
  app.add_option("--workloads", only, "Run only these workloads (0 = memcpy, 1-15)")
      ->delimiter(',');
  app.add_option("--work-dir", work_dir, "Logs and disk directories")->capture_default_str();
  app.add_option("--baseline-worker", baseline_worker,
                 "A bm-worker binary of another build (an older release, say) that workload 10 "
                 "also measures, in the same run, for comparison")
      ->check(CLI::ExistingFile);
  app.add_option("--baseline-bin-dir", baseline_bin_dir,
                 "The bin directory of another build (one from before block digests, say); "
                 "workload 11 runs its master, worker and client beside this build's to measure "
                 "what digests cost, and workload 4 its DISK_ONLY puts and gets (rows 4b)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--client", client_task, "(internal) run one client task")->group("");
  app.add_option("--serve-zmq", serve_zmq, "(internal) serve the raw ZeroMQ peer")->group("");
  app.add_option("--serve-bytes", serve_bytes, "(internal) raw ZeroMQ peer's buffer")->group("");
  app.add_option("--scrape", scrape_urls, "(internal) GET these URLs at --scrape-hz")
      ->delimiter(',')
      ->group("");
  app.add_option("--scrape-hz", scrape_hz, "(internal) scrape rounds a second")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  if (!client_task.empty()) return RunClientMode(client_task);
  if (!scrape_urls.empty()) {
    bm::Status status = bm::bench::RunStatusScraper(scrape_urls, scrape_hz);
    std::cerr << "bm-bench --scrape: " << status.ToString() << std::endl;
    return 1;
  }
  if (!serve_zmq.empty()) {
    bm::Status status = bm::bench::RunRawZmqServer(serve_zmq, serve_bytes);
    std::cerr << "bm-bench --serve-zmq: " << status.ToString() << std::endl;
    return 1;
  }

  bm::bench::BenchConfig config;
  config.env.bin_dir = bm::bench::OwnBinaryDir();
  config.env.work_dir = work_dir;
  config.seconds = seconds > 0 ? seconds : (quick ? 0.5 : 2);
  if (quick && !app.count("--big-block")) big_block = "256MiB";
  bm::Result<uint64_t> big = bm::ParseByteSize(big_block);
  if (!big.ok()) {
    std::cerr << "bm-bench: --big-block: " << big.status().message() << "\n";
    return 2;
  }
  config.big_block_bytes = *big;
  if (!master_blocks.empty()) {
    try {
      config.master_blocks = ParseCounts(master_blocks);
    } catch (const std::exception&) {
      std::cerr << "bm-bench: --master-blocks: expected numbers separated by commas\n";
      return 2;
    }
  } else if (quick) {
    config.master_blocks = {1'000'000};
  }
  config.rounds = rounds > 0 ? rounds : (quick ? 1 : 3);
  config.db_bench_values = quick ? 200 : 500;
  config.only.insert(only.begin(), only.end());
  config.baseline_worker = baseline_worker;
  config.baseline_bin_dir = baseline_bin_dir;

  bm::bench::Report report = bm::bench::RunBenchmark(config);
  if (json) {
    std::cout << report.ToJson().dump(2) << std::endl;
  } else {
    report.PrintTable(std::cout);
  }
  return 0;
}
