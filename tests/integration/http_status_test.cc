// The HTTP side of master and workers (--http): probes, the REST API against bmctl --json, the
// Prometheus endpoints scraped by a real Prometheus server, and the storage page rendered by a
// headless Chromium.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace bm::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr uint64_t kRddId = 7;
constexpr const char* kRddName = "points-of-interest";
constexpr int kRddPartitions = 4;
constexpr int kCachedPartitions = 3;  // 75% cached

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};

HttpReply HttpGet(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result result = client.Get(path);
  if (!result) return {};
  return {result->status, result->body};
}

json GetJson(int port, const std::string& path) {
  HttpReply reply = HttpGet(port, path);
  EXPECT_EQ(reply.status, 200) << path << ": " << reply.body;
  return reply.status == 200 ? json::parse(reply.body) : json();
}

// Where tests leave files for people to look at (screenshots): <build>/test-artifacts.
std::filesystem::path ArtifactDir() {
  std::filesystem::path dir = std::filesystem::path(BM_BIN_DIR).parent_path() / "test-artifacts";
  std::filesystem::create_directories(dir);
  return dir;
}

class HttpStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.SetMasterExtraArgs({"--http", "127.0.0.1:0"});
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    for (const char* id : {"w1", "w2"}) {
      WorkerSpec spec;
      spec.id = id;
      spec.extra_args = {"--http", "127.0.0.1:0"};
      ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(spec));
    }
    master_port_ = cluster_.HttpPort("master");
    worker_ports_ = {cluster_.HttpPort("w1"), cluster_.HttpPort("w2")};
    ASSERT_GT(master_port_, 0) << cluster_.LogTail("master");
    ASSERT_GT(worker_ports_[0], 0) << cluster_.LogTail("w1");
    ASSERT_GT(worker_ports_[1], 0) << cluster_.LogTail("w2");
  }

  // RDD 7, named, 3 of its 4 partitions cached over both workers, and one broadcast block.
  void CacheRdd() {
    Client client(cluster_.ClientOptionsFor());
    ASSERT_TRUE(
        client.RegisterRdd(kRddId, kRddName, StorageLevel::kMemoryOnly, kRddPartitions).ok());
    const std::vector<std::byte> data(3000, std::byte{7});
    for (int p = 0; p < kCachedPartitions; ++p) {
      Result<PutResult> put = client.Put(BlockId::Rdd(kRddId, p), data, StorageLevel::kMemoryOnly,
                                         PutOptions{p % 2 == 0 ? "w1" : "w2"});
      ASSERT_TRUE(put.ok()) << put.status().ToString();
    }
    const std::vector<std::byte> small(100, std::byte{1});
    ASSERT_TRUE(client.Put(BlockId::Broadcast(1), small, StorageLevel::kDiskOnly).ok());
  }

  LocalCluster cluster_;
  int master_port_ = 0;
  std::vector<int> worker_ports_;
};

TEST_F(HttpStatusTest, HealthzAndReadyzAnswerOnMasterAndWorkers) {
  for (int port : {master_port_, worker_ports_[0], worker_ports_[1]}) {
    EXPECT_EQ(HttpGet(port, "/healthz").status, 200);
    // Workers are registered (StartWorker waited for it), the master's loop is serving.
    EXPECT_TRUE(
        WaitFor([&] { return HttpGet(port, "/readyz").status == 200; }, std::chrono::seconds(10)));
  }
}

TEST_F(HttpStatusTest, WorkerIsNotReadyUntilItRegisters) {
  cluster_.KillMaster();
  // A fresh worker whose master is gone: alive, never ready.
  const int port = FreeLoopbackPort();
  Process lonely = Process::Start(
      BinaryPath("bm-worker"),
      {"--master", cluster_.master_endpoint(), "--listen", LoopbackEndpoint(FreeLoopbackPort()),
       "--memory", "16MiB", "--disk-dir", cluster_.dir().Sub("lonely-disk"), "--http",
       "127.0.0.1:" + std::to_string(port)},
      cluster_.dir().Sub("lonely.log"));
  ASSERT_TRUE(
      WaitFor([&] { return HttpGet(port, "/healthz").status == 200; }, std::chrono::seconds(10)));
  EXPECT_EQ(HttpGet(port, "/readyz").status, 503);
  EXPECT_THAT(HttpGet(port, "/readyz").body, HasSubstr("not registered"));
}

TEST_F(HttpStatusTest, RestApiAgreesWithBmctlJson) {
  ASSERT_NO_FATAL_FAILURE(CacheRdd());

  // RDDs: Spark's RDDStorageInfo fields against bmctl's.
  const json bmctl_rdds = cluster_.BmctlJson({"rdds"});
  const json rest_rdds = GetJson(master_port_, "/api/v1/rdds");
  ASSERT_EQ(rest_rdds.size(), bmctl_rdds.size());
  for (size_t i = 0; i < rest_rdds.size(); ++i) {
    EXPECT_EQ(rest_rdds[i]["id"], bmctl_rdds[i]["rdd"]);
    EXPECT_EQ(rest_rdds[i]["name"], bmctl_rdds[i]["name"]);
    EXPECT_EQ(rest_rdds[i]["storageLevel"], bmctl_rdds[i]["level"]);
    EXPECT_EQ(rest_rdds[i]["numPartitions"], bmctl_rdds[i]["total_partitions"]);
    EXPECT_EQ(rest_rdds[i]["numCachedPartitions"], bmctl_rdds[i]["cached_partitions"]);
    EXPECT_EQ(rest_rdds[i]["memoryUsed"], bmctl_rdds[i]["memory_bytes"]);
    EXPECT_EQ(rest_rdds[i]["diskUsed"], bmctl_rdds[i]["disk_bytes"]);
    EXPECT_EQ(rest_rdds[i]["executors"], bmctl_rdds[i]["workers"]);
  }
  ASSERT_EQ(rest_rdds.size(), 1u);
  EXPECT_EQ(GetJson(master_port_, "/api/v1/rdds?cursor=7").size(), 0u);
  EXPECT_EQ(rest_rdds[0]["name"], kRddName);
  EXPECT_EQ(rest_rdds[0]["numCachedPartitions"], kCachedPartitions);

  // Workers: their stats move with heartbeats, so compare until both read the same state.
  bool workers_agree = WaitFor(
      [&] {
        const json bmctl_workers = cluster_.BmctlJson({"workers"});
        const json rest_workers = GetJson(master_port_, "/api/v1/workers");
        if (rest_workers.size() != bmctl_workers.size()) return false;
        for (size_t i = 0; i < rest_workers.size(); ++i) {
          if (rest_workers[i]["id"] != bmctl_workers[i]["id"] ||
              rest_workers[i]["address"] != bmctl_workers[i]["address"] ||
              rest_workers[i]["state"] != bmctl_workers[i]["state"] ||
              rest_workers[i]["blocks"] != bmctl_workers[i]["blocks"] ||
              rest_workers[i]["memoryUsed"] != bmctl_workers[i]["memory_used"] ||
              rest_workers[i]["memoryCapacity"] != bmctl_workers[i]["memory_capacity"]) {
            return false;
          }
        }
        return true;
      },
      std::chrono::seconds(15));
  EXPECT_TRUE(workers_agree) << GetJson(master_port_, "/api/v1/workers").dump(2) << "\n"
                             << cluster_.BmctlJson({"workers"}).dump(2);

  // Blocks, a page of two at a time, against `bmctl blocks`.
  const json bmctl_blocks = cluster_.BmctlJson({"blocks"});
  json paged = json::array();
  std::string cursor;
  for (int page = 0; page < 10; ++page) {
    const json reply = GetJson(
        master_port_, "/api/v1/blocks?limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor));
    for (const json& block : reply["blocks"]) paged.push_back(block);
    if (reply["nextCursor"].is_null()) break;
    EXPECT_LE(reply["blocks"].size(), 2u);
    cursor = reply["nextCursor"];
  }
  ASSERT_EQ(paged.size(), bmctl_blocks.size());
  ASSERT_EQ(paged.size(), static_cast<size_t>(kCachedPartitions + 1));
  for (size_t i = 0; i < paged.size(); ++i) {
    EXPECT_EQ(paged[i]["blockName"], bmctl_blocks[i]["block"]);
    EXPECT_EQ(paged[i]["storageLevel"], bmctl_blocks[i]["level"]);
    EXPECT_EQ(paged[i]["copiesWanted"], bmctl_blocks[i]["copies_wanted"]);
    EXPECT_EQ(paged[i]["locations"], bmctl_blocks[i]["locations"]);
  }

  // One RDD's blocks and its page: partitions and spread over workers.
  const json rdd_blocks = GetJson(master_port_, "/api/v1/blocks?rdd=7");
  EXPECT_EQ(rdd_blocks["blocks"].size(), static_cast<size_t>(kCachedPartitions));
  const json rdd = GetJson(master_port_, "/api/v1/rdds/7");
  EXPECT_EQ(rdd["partitions"].size(), static_cast<size_t>(kCachedPartitions));
  EXPECT_EQ(rdd["partitions"][0]["blockName"], "rdd_7_0");
  EXPECT_EQ(rdd["partitions"][0]["memoryUsed"], 3000);
  ASSERT_EQ(rdd["dataDistribution"].size(), 2u);
  EXPECT_EQ(rdd["dataDistribution"][0]["executor"], "w1");
  EXPECT_EQ(rdd["dataDistribution"][0]["memoryUsed"], 6000);  // partitions 0 and 2
  EXPECT_EQ(rdd["dataDistribution"][1]["memoryUsed"], 3000);

  // Locations of a few ids, one unknown, against `bmctl locations`.
  const json bmctl_locations =
      cluster_.BmctlJson({"locations", "rdd_7_1", "rdd_7_3", "broadcast_1"});
  const json rest_locations =
      GetJson(master_port_, "/api/v1/locations?ids=rdd_7_1,rdd_7_3,broadcast_1");
  ASSERT_EQ(rest_locations.size(), bmctl_locations.size());
  for (size_t i = 0; i < rest_locations.size(); ++i) {
    EXPECT_EQ(rest_locations[i]["blockName"], bmctl_locations[i]["block"]);
    EXPECT_EQ(rest_locations[i]["locations"], bmctl_locations[i]["locations"]);
  }
  EXPECT_TRUE(rest_locations[1]["locations"].empty());
}

TEST_F(HttpStatusTest, BadRequestsGetClearErrors) {
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/blocks?limit=0").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/blocks?limit=100000").status, 400);
  const HttpReply bad_cursor = HttpGet(master_port_, "/api/v1/blocks?cursor=nope");
  EXPECT_EQ(bad_cursor.status, 400);
  EXPECT_THAT(bad_cursor.body, HasSubstr("nope"));
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/blocks?rdd=x").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/rdds/999").status, 404);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/rdds?limit=0").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/rdds?cursor=-1").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/rdds/99999999999999999999999").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/locations").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/api/v1/locations?ids=rdd_1").status, 400);
  EXPECT_EQ(HttpGet(master_port_, "/no/such/page").status, 404);
  EXPECT_EQ(HttpGet(master_port_, "/rdd/12345").status, 404);
  // Still serving.
  EXPECT_EQ(HttpGet(master_port_, "/healthz").status, 200);
}

TEST_F(HttpStatusTest, MetricsCountBlocksOnMasterAndWorkers) {
  ASSERT_NO_FATAL_FAILURE(CacheRdd());
  const HttpReply master = HttpGet(master_port_, "/metrics");
  ASSERT_EQ(master.status, 200);
  EXPECT_THAT(master.body, HasSubstr("# TYPE blockmgr_blocks gauge\nblockmgr_blocks 4\n"));
  EXPECT_THAT(master.body, HasSubstr("blockmgr_workers{state=\"active\"} 2\n"));
  EXPECT_THAT(master.body, HasSubstr("blockmgr_master_request_duration_seconds_bucket{op="
                                     "\"report_blocks\",le=\"+Inf\"}"));
  // Block ids never become labels.
  EXPECT_THAT(master.body, ::testing::Not(HasSubstr("rdd_7_")));

  uint64_t memory_blocks = 0, disk_blocks = 0, puts = 0;
  for (int port : worker_ports_) {
    const HttpReply worker = HttpGet(port, "/metrics");
    ASSERT_EQ(worker.status, 200);
    auto value = [&](const std::string& series) -> uint64_t {
      const size_t at = worker.body.find("\n" + series + " ");
      EXPECT_NE(at, std::string::npos) << series << " missing in\n" << worker.body;
      return at == std::string::npos ? 0 : std::stoull(worker.body.substr(at + series.size() + 2));
    };
    memory_blocks += value("blockmgr_worker_blocks{tier=\"memory\"}");
    disk_blocks += value("blockmgr_worker_blocks{tier=\"disk\"}");
    puts += value("blockmgr_worker_requests_total{op=\"put\",result=\"ok\"}");
  }
  EXPECT_EQ(memory_blocks, static_cast<uint64_t>(kCachedPartitions));
  EXPECT_EQ(disk_blocks, 1u);
  EXPECT_GE(puts, 4u);
}

// HTTP runs beside the event loops: connections that send half a request and then nothing,
// more than the HTTP pool has threads, hold up neither puts nor gets nor the master's lookups.
TEST_F(HttpStatusTest, StalledHttpClientsDoNotStallBlockTraffic) {
  std::vector<int> stalled;
  for (int port : {master_port_, worker_ports_[0], worker_ports_[1]}) {
    for (int i = 0; i < 8; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_GE(fd, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(static_cast<uint16_t>(port));
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
      const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
      ASSERT_EQ(::send(fd, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
      stalled.push_back(fd);
    }
  }
  ASSERT_NO_FATAL_FAILURE(CacheRdd());
  EXPECT_EQ(cluster_.BmctlJson({"blocks"}).size(), static_cast<size_t>(kCachedPartitions + 1));
  const CommandResult got =
      cluster_.Bmctl({"get", "rdd_7_1", "-o", cluster_.dir().Sub("rdd_7_1.bin")});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(std::filesystem::file_size(cluster_.dir().Sub("rdd_7_1.bin")), 3000u);
  for (int fd : stalled) ::close(fd);
  // And HTTP answers again once they are gone.
  EXPECT_TRUE(WaitFor([&] { return HttpGet(master_port_, "/api/v1/rdds").status == 200; },
                      std::chrono::seconds(15)));
}

// Debian's prometheus scrapes the master and both workers; its HTTP API then reports the same
// number of blocks as `bmctl blocks`.
TEST_F(HttpStatusTest, PrometheusScrapesTheBlockCountBmctlSees) {
  const std::string prometheus = FindOnPath("prometheus");
  if (prometheus.empty()) {
    GTEST_SKIP() << "prometheus is not installed (deploy/install-test-deps.sh installs it)";
  }
  ASSERT_NO_FATAL_FAILURE(CacheRdd());
  const std::string config = cluster_.dir().Sub("prometheus.yml");
  {
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        << "scrape_configs:\n"
        << "  - job_name: blockmgr-master\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << master_port_ << "']\n"
        << "  - job_name: blockmgr-workers\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << worker_ports_[0]
        << "', '127.0.0.1:" << worker_ports_[1] << "']\n";
  }
  const int port = FreeLoopbackPort();
  Process server = Process::Start(
      prometheus,
      {"--config.file=" + config, "--storage.tsdb.path=" + cluster_.dir().Sub("prometheus-data"),
       "--web.listen-address=127.0.0.1:" + std::to_string(port)},
      cluster_.dir().Sub("prometheus.log"));

  auto query = [&](const std::string& expression) -> json {
    const HttpReply reply =
        HttpGet(port, "/api/v1/query?query=" + httplib::detail::encode_query_param(expression));
    if (reply.status != 200) return json();
    json parsed = json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || parsed["status"] != "success") return json();
    return parsed["data"]["result"];
  };
  // Every target scraped successfully at least once.
  const bool all_up = WaitFor(
      [&] {
        const json up = query("up");
        if (!up.is_array() || up.size() != 3) return false;
        for (const json& series : up) {
          if (series["value"][1] != "1") return false;
        }
        return true;
      },
      std::chrono::seconds(60));
  std::ifstream log(cluster_.dir().Sub("prometheus.log"));
  std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(all_up) << query("up").dump(2) << "\n" << log_text.substr(0, 4000);

  const size_t bmctl_blocks = cluster_.BmctlJson({"blocks"}).size();
  ASSERT_EQ(bmctl_blocks, static_cast<size_t>(kCachedPartitions + 1));
  std::string scraped;
  const bool matches = WaitFor(
      [&] {
        const json result = query("blockmgr_blocks");
        if (!result.is_array() || result.size() != 1) return false;
        scraped = result[0]["value"][1];
        return scraped == std::to_string(bmctl_blocks);
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(matches) << "prometheus has blockmgr_blocks " << scraped << ", bmctl counts "
                       << bmctl_blocks;
  // The workers' copies add up to the same blocks (one copy each here).
  const json copies = query("sum(blockmgr_worker_blocks)");
  ASSERT_TRUE(copies.is_array() && copies.size() == 1) << copies.dump();
  EXPECT_EQ(copies[0]["value"][1], std::to_string(bmctl_blocks));
}

// Headless Chromium renders the storage page: the RDD's name and cached fraction are in the
// DOM, and a screenshot is written (kept under <build>/test-artifacts/).
TEST_F(HttpStatusTest, ChromiumRendersTheStoragePage) {
  const std::string chromium = FindOnPath("chromium");
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (deploy/install-test-deps.sh installs it)";
  }
  ASSERT_NO_FATAL_FAILURE(CacheRdd());
  const std::string url = "http://127.0.0.1:" + std::to_string(master_port_) + "/storage";
  auto chromium_args = [&](const std::string& profile) {
    return std::vector<std::string>{"--headless",
                                    "--no-sandbox",
                                    "--disable-gpu",
                                    "--disable-quic",
                                    "--no-first-run",
                                    "--disable-background-networking",
                                    "--disable-component-update",
                                    "--disable-sync",
                                    "--disable-dev-shm-usage",
                                    "--hide-scrollbars",
                                    "--window-size=1280,720",
                                    "--user-data-dir=" + cluster_.dir().Sub(profile)};
  };

  std::vector<std::string> dump = chromium_args("chromium-dom");
  dump.push_back("--dump-dom");
  dump.push_back(url);
  const CommandResult dom = RunCommand(chromium, dump, "", std::chrono::seconds(120));
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  EXPECT_THAT(dom.out, HasSubstr(kRddName));
  EXPECT_THAT(dom.out, HasSubstr("3 / 4"));
  EXPECT_THAT(dom.out, HasSubstr("75%"));

  const std::filesystem::path png = ArtifactDir() / "storage_page.png";
  std::filesystem::remove(png);
  std::vector<std::string> shot = chromium_args("chromium-shot");
  shot.push_back("--screenshot=" + png.string());
  shot.push_back(url);
  const CommandResult screenshot = RunCommand(chromium, shot, "", std::chrono::seconds(120));
  ASSERT_EQ(screenshot.exit_code, 0) << screenshot.err;
  ASSERT_TRUE(std::filesystem::exists(png)) << screenshot.err;
  std::ifstream in(png, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 3]));
  };
  EXPECT_EQ(be32(16), 1280u);  // IHDR width
  EXPECT_EQ(be32(20), 720u);   // IHDR height
  // A blank page compresses to a few hundred bytes; a rendered table with text does not.
  EXPECT_GT(bytes.size(), 10000u) << "screenshot looks blank: " << png;
}

}  // namespace
}  // namespace bm::testing
