// deploy/grafana/blockmgr.json, the operators' dashboard: it has the panels an operator looks
// for, and every panel's PromQL, run by a real Prometheus scraping a real cluster (keys on, a
// tenant with a quota, puts and gets going), returns data. Grafana is not packaged in Debian;
// the queries are what can be checked here.

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/security/curve_keys.h"
#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

using json = nlohmann::json;

const std::string kDashboard = std::string(BM_SOURCE_DIR) + "/deploy/grafana/blockmgr.json";

struct PanelQuery {
  std::string panel;
  std::string expr;
};

json LoadDashboard() {
  json dashboard = json::parse(ReadFile(kDashboard), nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(dashboard.is_discarded()) << kDashboard << " is not JSON";
  return dashboard;
}

// Every panel's queries; rows have none.
std::vector<PanelQuery> Queries(const json& dashboard) {
  std::vector<PanelQuery> out;
  for (const json& panel : dashboard.value("panels", json::array())) {
    if (panel.value("type", "") == "row") continue;
    for (const json& target : panel.value("targets", json::array())) {
      out.push_back({panel.value("title", ""), target.value("expr", "")});
    }
  }
  return out;
}

// Grafana's interval variables, as Grafana would fill them in for a short time range.
std::string WithGrafanaVariables(std::string expr) {
  expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "1m");
  return std::regex_replace(expr, std::regex(R"(\$__range)"), "5m");
}

class DashboardTest : public ::testing::Test {
 protected:
  // A keyed cluster serving /metrics: a master, two workers, and the tenant "analytics" (key
  // "alice") with a memory quota, holding an RDD of two-copy blocks it has read back.
  void StartCluster() {
    ASSERT_NO_FATAL_FAILURE(cluster_.UseKeys({"w1", "w2"}));
    ASSERT_TRUE(GenerateCertificate(cluster_.keys_dir(), "alice", KeyRole::kClient).ok());
    std::ofstream(cluster_.keys_dir() + "/alice.tenant") << "analytics\n";
    cluster_.SetMasterExtraArgs({"--http", "127.0.0.1:0"});
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    for (const char* id : {"w1", "w2"}) {
      WorkerSpec spec;
      spec.id = id;
      spec.extra_args = {"--http", "127.0.0.1:0"};
      ASSERT_NO_FATAL_FAILURE(cluster_.StartWorker(spec));
    }
    CommandResult quota = cluster_.Bmctl({"quota", "set", "analytics", "--memory", "64MiB"});
    ASSERT_EQ(quota.exit_code, 0) << Describe(quota);
    PutAndGet();
  }

  void PutAndGet() {
    const std::string bytes(100000, 'b');
    for (int p = 0; p < 4; ++p) {
      const std::string block = "rdd_5_" + std::to_string(p);
      CommandResult put =
          cluster_.BmctlAs("alice", {"put", block, "-", "--level", "MEMORY_AND_DISK_2"}, bytes);
      ASSERT_EQ(put.exit_code, 0) << Describe(put);
      CommandResult got = cluster_.BmctlAs("alice", {"get", block});
      ASSERT_EQ(got.exit_code, 0) << Describe(got);
    }
  }

  // Debian's prometheus on a free loopback port, scraping the master and the workers each
  // second; returns its port.
  int StartPrometheus(const std::string& prometheus) {
    const std::string config = cluster_.dir().Sub("prometheus.yml");
    std::ofstream out(config);
    out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        << "scrape_configs:\n"
        << "  - job_name: blockmgr-master\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << cluster_.HttpPort("master") << "']\n"
        << "  - job_name: blockmgr-workers\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << cluster_.HttpPort("w1")
        << "', '127.0.0.1:" << cluster_.HttpPort("w2") << "']\n";
    out.close();
    const int port = FreeLoopbackPort();
    prometheus_ = Process::Start(
        prometheus,
        {"--config.file=" + config, "--storage.tsdb.path=" + cluster_.dir().Sub("prometheus-data"),
         "--web.listen-address=127.0.0.1:" + std::to_string(port)},
        cluster_.dir().Sub("prometheus.log"));
    return port;
  }

  // The result vector of an instant query; an error (a query Prometheus rejects) as a string.
  static json Query(int port, const std::string& expr) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(5);
    client.set_read_timeout(10);
    httplib::Result result =
        client.Get("/api/v1/query", httplib::Params{{"query", expr}}, httplib::Headers{});
    if (!result) return "no answer";
    json parsed = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return "not JSON: " + result->body;
    if (parsed.value("status", "") != "success") return parsed.value("error", result->body);
    return parsed["data"]["result"];
  }

  LocalCluster cluster_;
  std::optional<Process> prometheus_;
};

TEST_F(DashboardTest, HasThePanelsOperatorsLookFor) {
  const json dashboard = LoadDashboard();
  std::vector<std::string> titles;
  for (const json& panel : dashboard.value("panels", json::array())) {
    titles.push_back(panel.value("title", ""));
    if (panel.value("type", "") == "row") continue;
    EXPECT_FALSE(panel.value("targets", json::array()).empty()) << titles.back() << ": no query";
    // The datasource is the dashboard's variable: whichever Prometheus the operator picks.
    const json datasource = panel.value("datasource", json::object());
    EXPECT_EQ(datasource.value("uid", ""), "${datasource}") << titles.back();
  }
  for (const char* wanted : {"Cluster", "Workers", "Memory per worker", "Disk per worker",
                             "Requests per second", "Worker latency", "Replication backlog",
                             "Lost blocks", "Failovers", "Bytes per tenant", "Quotas"}) {
    EXPECT_NE(std::find(titles.begin(), titles.end(), wanted), titles.end()) << wanted;
  }
}

TEST_F(DashboardTest, EveryPanelsQueryReturnsDataFromARealCluster) {
  const std::string prometheus = FindOnPath("prometheus");
  if (prometheus.empty()) {
    GTEST_SKIP() << "prometheus is not installed (deploy/install-test-deps.sh installs it)";
  }
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq was built without CURVE (libsodium)";
  const std::vector<PanelQuery> queries = Queries(LoadDashboard());
  ASSERT_GE(queries.size(), 20u);
  ASSERT_NO_FATAL_FAILURE(StartCluster());
  const int port = StartPrometheus(prometheus);
  ASSERT_TRUE(WaitFor(
      [&] {
        const json up = Query(port, "sum(up)");
        return up.is_array() && up.size() == 1 && up[0]["value"][1] == "3";
      },
      std::chrono::seconds(60)))
      << "prometheus does not scrape all three: " << Query(port, "up").dump()
      << ReadFile(cluster_.dir().Sub("prometheus.log")).substr(0, 4000);
  // Rates need two scrapes with traffic between them: more puts and gets after the first.
  ASSERT_NO_FATAL_FAILURE(PutAndGet());

  for (const PanelQuery& query : queries) {
    const std::string expr = WithGrafanaVariables(query.expr);
    json last;
    const bool has_data = WaitFor(
        [&] {
          last = Query(port, expr);
          return last.is_array() && !last.empty();
        },
        std::chrono::seconds(20));
    EXPECT_TRUE(has_data) << "panel \"" << query.panel << "\": " << expr << "\n  " << last.dump();
  }
}

}  // namespace
}  // namespace bm::testing
