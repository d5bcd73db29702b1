// deploy/k8s run for real: `podman kube play` of kube-play.yaml (the manifests' servers as pods
// on one machine, deploy/k8s/kube-play.sh) with the images deploy/image/build.sh made (the
// ctest fixture K8sImageBuild, once per run): a ZooKeeper, two masters elected through it and
// three workers, as containers on the podman network `blockmgr`. bmctl on the host puts and gets
// blocks through them; the standby takes over from a removed leader pod; the two-copy blocks of
// a removed worker pod get their second copy back on the other workers.
//
// Pods are removed with `podman pod rm -f` (killed, and not restarted in place): as a node lost,
// or a pod deleted whose replacement starts empty elsewhere.

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "blockmgr/client.h"
#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::seconds;

const std::string kKubePlay = std::string(BM_SOURCE_DIR) + "/deploy/k8s/kube-play.sh";
// The pods' addresses (kube-play.yaml's blockmgr.io/ip annotations).
constexpr const char* kMasters = "tcp://10.89.77.11:7077,tcp://10.89.77.12:7077";
const std::vector<std::string> kMasterPods = {"blockmgr-master-0", "blockmgr-master-1"};
const std::map<std::string, std::string> kHttp = {{"blockmgr-master-0", "10.89.77.11:8080"},
                                                  {"blockmgr-master-1", "10.89.77.12:8080"},
                                                  {"blockmgr-worker-1", "10.89.77.21:9100"},
                                                  {"blockmgr-worker-2", "10.89.77.22:9100"},
                                                  {"blockmgr-worker-3", "10.89.77.23:9100"}};

int HttpStatus(const std::string& host_port, const std::string& path) {
  const size_t colon = host_port.find(':');
  httplib::Client client(host_port.substr(0, colon), std::stoi(host_port.substr(colon + 1)));
  client.set_connection_timeout(2);
  client.set_read_timeout(5);
  httplib::Result result = client.Get(path);
  return result ? result->status : 0;
}

class K8sPlayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    podman_ = FindTool({"/usr/bin/podman"});
    if (podman_.empty()) {
      GTEST_SKIP() << "podman is not installed (deploy/install-test-deps.sh installs it)";
    }
    CommandResult info = Podman("info --format '{{.Host.OCIRuntime.Name}}'");
    if (info.exit_code != 0) GTEST_SKIP() << "podman cannot run here: " << Describe(info);
    for (const char* image : {"blockmgr:0.1.0", "blockmgr-zookeeper:0.1.0"}) {
      CommandResult exists = Podman(std::string("image exists ") + image);
      ASSERT_EQ(exists.exit_code, 0)
          << image << " was not built (the K8sImageBuild test builds it: deploy/image/build.sh)";
    }
    // Pods a crashed earlier run left behind would hold the names and addresses.
    Shell(KubePlayCommand("down"));
    CommandResult up = Shell(KubePlayCommand("up"), seconds(300));
    ASSERT_EQ(up.exit_code, 0) << Describe(up);
    started_ = true;
    client_.emplace(ClientOptions{kMasters, std::chrono::milliseconds(5000)});
    ASSERT_TRUE(WaitFor([&] { return !Leader().empty() && StandbyInSync(); }, seconds(120)))
        << "no leader with a standby in sync\n"
        << Logs();
    ASSERT_TRUE(WaitFor(
        [&] {
          Result<std::vector<WorkerInfo>> workers = client_->Workers();
          return workers.ok() && workers->size() == 3;
        },
        seconds(60)))
        << "the three workers did not register\n"
        << Logs();
  }

  void TearDown() override {
    client_.reset();
    if (started_) {
      CommandResult down = Shell(KubePlayCommand("down"), seconds(300));
      EXPECT_EQ(down.exit_code, 0) << Describe(down);
    }
  }

  std::string KubePlayCommand(const std::string& what) const {
    // The podman settings this machine needs, where its cgroups are v1 (kube-play.sh picks
    // them), apply to the test's own podman commands too.
    return "'" + kKubePlay + "' " + what + " 2>&1";
  }

  CommandResult Podman(const std::string& arguments, seconds timeout = seconds(120)) const {
    return Shell(
        "if [ \"$(stat -fc %T /sys/fs/cgroup)\" != cgroup2fs ] && [ -z \"$CONTAINERS_CONF\" ]; "
        "then export CONTAINERS_CONF='" +
            std::string(BM_SOURCE_DIR) + "/deploy/k8s/podman-cgroupv1.conf'; fi; '" + podman_ +
            "' " + arguments,
        timeout);
  }

  CommandResult Bmctl(const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> all = {"--master", kMasters, "--timeout", "10"};
    all.insert(all.end(), args.begin(), args.end());
    return RunCommand(BinaryPath("bmctl"), all, input, seconds(60));
  }

  std::string Leader() {
    for (const MasterInfo& info : client_->Masters()) {
      if (info.error.empty() && info.leader) return info.id;
    }
    return "";
  }

  bool StandbyInSync() {
    for (const MasterInfo& info : client_->Masters()) {
      if (info.error.empty() && !info.leader && info.in_sync) return true;
    }
    return false;
  }

  // The workers holding each block, from the leader.
  std::map<std::string, std::set<std::string>> Holders(const std::vector<std::string>& blocks) {
    std::map<std::string, std::set<std::string>> out;
    std::vector<BlockId> ids;
    for (const std::string& block : blocks) ids.push_back(*BlockId::Parse(block));
    Result<std::vector<BlockLocations>> found = client_->Locations(ids);
    if (!found.ok()) return out;
    for (const BlockLocations& block : *found) {
      for (const BlockLocation& location : block.locations) {
        out[block.block.ToString()].insert(location.worker_id);
      }
    }
    return out;
  }

  // The tail of each pod's log, for failure messages.
  std::string Logs() const {
    std::string out;
    for (const char* container :
         {"zookeeper-zookeeper", "blockmgr-master-0-master", "blockmgr-master-1-master",
          "blockmgr-worker-1-worker", "blockmgr-worker-2-worker", "blockmgr-worker-3-worker"}) {
      CommandResult logs = Podman(std::string("logs --tail 10 ") + container + " 2>&1");
      out += std::string("--- ") + container + "\n" + logs.out;
    }
    return out;
  }

  std::string podman_;
  bool started_ = false;
  std::optional<Client> client_;
  TempDir dir_;
};

TEST_F(K8sPlayTest, BmctlOnTheHostPutsAndGetsBlocksThroughThePods) {
  const std::string data = RandomBytes(3 << 20, /*seed=*/1);
  const std::string file = dir_.Sub("block");
  WriteFile(file, data);
  CommandResult put = Bmctl({"put", "rdd_1_0", file, "--level", "MEMORY_AND_DISK_2"});
  ASSERT_EQ(put.exit_code, 0) << Describe(put) << Logs();
  CommandResult got = Bmctl({"get", "rdd_1_0", "-o", dir_.Sub("back")});
  ASSERT_EQ(got.exit_code, 0) << Describe(got);
  EXPECT_TRUE(ReadFile(dir_.Sub("back")) == data) << "rdd_1_0 came back different";
  // Two copies, on two of the pods.
  EXPECT_EQ(Holders({"rdd_1_0"})["rdd_1_0"].size(), 2u);
  // What the probes ask: every server is alive; the leader and the workers are ready, the
  // standby is not (so that a Service routes to the leader alone).
  const std::string leader = Leader();
  for (const auto& [pod, address] : kHttp) {
    EXPECT_EQ(HttpStatus(address, "/healthz"), 200) << pod;
    const bool standby = pod.starts_with("blockmgr-master") && pod != leader;
    EXPECT_EQ(HttpStatus(address, "/readyz"), standby ? 503 : 200) << pod;
  }
}

TEST_F(K8sPlayTest, TheStandbyReplacesARemovedLeaderPod) {
  CommandResult put = Bmctl({"put", "rdd_2_0", "-", "--level", "MEMORY_ONLY_2"}, "kept");
  ASSERT_EQ(put.exit_code, 0) << Describe(put);
  const std::string leader = Leader();
  ASSERT_TRUE(leader == kMasterPods[0] || leader == kMasterPods[1]) << "leader '" << leader << "'";
  const std::string standby = leader == kMasterPods[0] ? kMasterPods[1] : kMasterPods[0];

  CommandResult removed = Podman("pod rm -f " + leader);
  ASSERT_EQ(removed.exit_code, 0) << Describe(removed);
  ASSERT_TRUE(WaitFor([&] { return Leader() == standby; }, seconds(60)))
      << standby << " did not take over\n"
      << Logs();
  // The new leader has the metadata, the workers follow it, and new puts go through it.
  CommandResult got = Bmctl({"get", "rdd_2_0"});
  EXPECT_EQ(got.exit_code, 0) << Describe(got);
  EXPECT_EQ(got.out, "kept");
  EXPECT_TRUE(WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client_->Workers();
        if (!workers.ok() || workers->size() != 3) return false;
        for (const WorkerInfo& worker : *workers) {
          if (worker.state != WorkerState::kActive) return false;
        }
        return true;
      },
      seconds(60)));
  CommandResult after = Bmctl({"put", "rdd_2_1", "-", "--level", "MEMORY_ONLY"}, "new");
  EXPECT_EQ(after.exit_code, 0) << Describe(after);
}

TEST_F(K8sPlayTest, ARemovedWorkerPodsTwoCopyBlocksGetTheirSecondCopyBack) {
  std::vector<std::string> blocks;
  for (int p = 0; p < 6; ++p) {
    blocks.push_back("rdd_3_" + std::to_string(p));
    CommandResult put = Bmctl({"put", blocks.back(), "-", "--level", "MEMORY_AND_DISK_2"},
                              RandomBytes(100000, /*seed=*/p));
    ASSERT_EQ(put.exit_code, 0) << Describe(put);
  }
  std::map<std::string, std::set<std::string>> before = Holders(blocks);
  // The worker holding the most of them.
  std::map<std::string, int> held;
  for (const auto& [block, workers] : before) {
    ASSERT_EQ(workers.size(), 2u) << block;
    for (const std::string& worker : workers) ++held[worker];
  }
  std::string victim;
  for (const auto& [worker, count] : held) {
    if (victim.empty() || count > held[victim]) victim = worker;
  }
  ASSERT_FALSE(victim.empty());

  CommandResult removed = Podman("pod rm -f " + victim);
  ASSERT_EQ(removed.exit_code, 0) << Describe(removed);
  // The master drops it after --heartbeat-timeout (10 s) and copies each of its blocks from the
  // remaining copy to the third worker.
  std::map<std::string, std::set<std::string>> after;
  const bool replicated = WaitFor(
      [&] {
        after = Holders(blocks);
        if (after.size() != blocks.size()) return false;
        for (const auto& [block, workers] : after) {
          if (workers.size() != 2 || workers.contains(victim)) return false;
        }
        return true;
      },
      seconds(90));
  std::string seen;
  for (const auto& [block, workers] : after) {
    seen += block + ":";
    for (const std::string& worker : workers) seen += " " + worker;
    seen += "\n";
  }
  EXPECT_TRUE(replicated) << "after removing " << victim << ":\n" << seen << Logs();
  for (const std::string& block : blocks) {
    CommandResult got = Bmctl({"get", block, "-o", "/dev/null"});
    EXPECT_EQ(got.exit_code, 0) << block << ": " << Describe(got);
  }
}

}  // namespace
}  // namespace bm::testing
