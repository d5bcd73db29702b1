// blockmgr's Dask integration across hosts: three hosts (network namespaces on a bridge, see
// host_network.h), each running a bm-worker and one single-threaded Dask worker; bm-master and
// dask-scheduler on host 0. A driver (dask_placement_driver.py, in host 0) persists a bag
// through blockmgr.dask.persist, computes it once (caching every partition on the host its task
// ran on) and again: the second computation must read its partitions on the hosts holding
// them, counted by the bm-workers' own metrics (blockmgr_worker_block_reads_total by origin).

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "blockmgr/client.h"
#include "tests/multihost/host_network.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kHosts = 3;
constexpr int kPartitions = 24;
constexpr const char* kPython = "/usr/bin/python3";

class MultiHostDaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(BM_PYTHON_BUILD_DIR) + "/blockmgr/__init__.py")) {
      GTEST_SKIP() << "the blockmgr Python module was not built (" << BM_PYTHON_BUILD_DIR << ")";
    }
    if (RunCommand(kPython, {"-c", "import distributed, dask.bag"}).exit_code != 0) {
      GTEST_SKIP() << "needs python3-distributed (and dask.bag) for " << kPython;
    }
    Result<std::unique_ptr<HostNetwork>> net = HostNetwork::Create(kHosts);
    if (!net.ok()) {
      GTEST_SKIP() << "cannot create network namespaces on this machine (needs root or "
                      "CAP_NET_ADMIN, iproute2 and bridge support): "
                   << net.status().ToString();
    }
    net_ = std::move(net).value();
    // Plaintext (--insecure): the Python client takes no keys. The subnet exists only inside
    // these namespaces.
    master_address_ = "tcp://" + net_->address(0) + ":7077";
    scheduler_address_ = "tcp://" + net_->address(0) + ":8786";
    Start(0, BinaryPath("bm-master"), {"--listen", master_address_, "--insecure"}, "master");
    Start(0, "/usr/bin/env",
          Python({"-m", "distributed.cli.dask_scheduler", "--host", net_->address(0), "--port",
                  "8786", "--no-dashboard"}),
          "dask-scheduler");
    for (int host = 0; host < kHosts; ++host) {
      // Namespaces share the filesystem: every host gets directories of its own.
      const std::string name = "host" + std::to_string(host);
      const std::string address = "tcp://" + net_->address(host) + ":7078";
      const std::string http = net_->address(host) + ":9100";
      Start(host, BinaryPath("bm-worker"),
            {"--master", master_address_, "--listen", address, "--advertise", address, "--id",
             "worker-" + name, "--memory", "64MiB", "--disk-dir", dir_.Sub(name + "-disk"),
             "--http", http, "--insecure"},
            "bm-worker-" + name);
      metrics_urls_.push_back("http://" + http + "/metrics");
      Start(host, "/usr/bin/env",
            Python({"-m", "distributed.cli.dask_worker", scheduler_address_, "--host",
                    net_->address(host), "--nthreads", "1", "--no-nanny", "--no-dashboard",
                    "--local-directory", dir_.Sub(name + "-dask")}),
            "dask-worker-" + name);
    }
    ASSERT_TRUE(WaitFor([&] { return ListedWorkers() == kHosts; }, seconds(30)))
        << "the bm-workers did not all register";
  }

  void TearDown() override {
    processes_.clear();  // before the namespaces they run in
    net_.reset();
  }

  // `args` for /usr/bin/env running Python with the built module (and this folder) on its path.
  std::vector<std::string> Python(std::vector<std::string> args) const {
    args.insert(args.begin(), {"PYTHONPATH=" + std::string(BM_PYTHON_BUILD_DIR) + ":" +
                                   std::string(BM_MULTIHOST_SOURCE_DIR),
                               "PYTHONDONTWRITEBYTECODE=1", kPython});
    return args;
  }

  void Start(int host, const std::string& binary, std::vector<std::string> args,
             const std::string& name) {
    auto [ip, ip_args] = net_->InHost(host, binary, std::move(args));
    processes_.push_back(
        std::make_unique<Process>(Process::Start(ip, ip_args, dir_.Sub(name + ".log"))));
  }

  size_t ListedWorkers() {
    size_t listed = 0;
    net_->RunIn(0, [&] {
      Client client(
          ClientOptions{.master_address = master_address_, .request_timeout = milliseconds(2000)});
      Result<std::vector<WorkerInfo>> workers = client.Workers();
      if (workers.ok()) listed = workers->size();
    });
    return listed;
  }

  TempDir dir_;
  std::unique_ptr<HostNetwork> net_;
  std::string master_address_;
  std::string scheduler_address_;
  std::vector<std::string> metrics_urls_;
  std::vector<std::unique_ptr<Process>> processes_;
};

TEST_F(MultiHostDaskTest, PersistedPartitionsAreReadOnTheirOwnHost) {
  std::vector<std::string> args = {
      std::string(BM_MULTIHOST_SOURCE_DIR) + "/dask_placement_driver.py", scheduler_address_,
      master_address_, std::to_string(kPartitions), std::to_string(kHosts)};
  args.insert(args.end(), metrics_urls_.begin(), metrics_urls_.end());
  auto [ip, ip_args] = net_->InHost(0, "/usr/bin/env", Python(std::move(args)));
  Result<CommandResult> driver = RunCommand(Command{.binary = ip,
                                                    .args = ip_args,
                                                    .stderr_log = dir_.Sub("driver.log"),
                                                    .timeout = seconds(240)});
  ASSERT_TRUE(driver.ok()) << driver.status().ToString();
  ASSERT_EQ(driver->exit_code, 0) << ReadFile(dir_.Sub("driver.log"));
  const nlohmann::json result = nlohmann::json::parse(driver->out, nullptr, false);
  ASSERT_FALSE(result.is_discarded()) << "the driver printed no JSON: " << driver->out << "\n"
                                      << ReadFile(dir_.Sub("driver.log"));
  int64_t expected_sum = 0;
  for (int64_t x = 0; x < kPartitions * 1000; ++x) expected_sum += 2 * x;
  EXPECT_EQ(result["sum"].get<int64_t>(), expected_sum);

  // Every partition was read from the cache once by the second computation, on its own host
  // for at least 90% of them. (The driver's "read_where_cached" tells the same from Dask's
  // side, for diagnosis: without placement about a third of the partitions are.)
  const int64_t local = result["local"].get<int64_t>();
  const int64_t remote = result["remote"].get<int64_t>();
  EXPECT_GE(local + remote, kPartitions) << driver->out;
  ASSERT_GT(local + remote, 0) << "no block reads counted: " << driver->out;
  EXPECT_GE(static_cast<double>(local) / static_cast<double>(local + remote), 0.9) << driver->out;
}

}  // namespace
}  // namespace bm::testing
