// deploy/cluster.sh as a developer runs it: a local cluster of one master, or of standby
// masters elected through a ZooKeeper it starts itself, and `stop` ending every process.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/zookeeper_server.h"

namespace bm::testing {
namespace {

namespace fs = std::filesystem;

const std::string kScript = std::string(BM_SOURCE_DIR) + "/deploy/cluster.sh";

bool LoopbackPortIsFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

// A base port P for the script whose ports (P .. P+2, P+90, P+100) are free now. Below the
// kernel's ephemeral range, so that outgoing connections do not take them meanwhile.
int FreeScriptPort() {
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> base(20000, 29800);
  while (true) {
    const int port = base(random);
    if (LoopbackPortIsFree(port) && LoopbackPortIsFree(port + 1) && LoopbackPortIsFree(port + 2) &&
        LoopbackPortIsFree(port + 90) && LoopbackPortIsFree(port + 100)) {
      return port;
    }
  }
}

class ClusterScriptTest : public ::testing::Test {
 protected:
  // Stops whatever a failed test left running.
  void TearDown() override { Script({"stop"}); }

  // cluster.sh COMMAND with this test's run folder, binaries and ports (the script takes
  // P .. P+workers, P+90 for ZooKeeper and P+100 for a second master).
  CommandResult Script(const std::vector<std::string>& command_and_flags) {
    std::vector<std::string> args = command_and_flags;
    args.insert(args.end(), {"--run-dir", run_dir_});
    if (command_and_flags.front() == "start") {
      args.insert(args.end(), {"--bin", BM_BIN_DIR, "--port", std::to_string(port_)});
    }
    return RunCommand(kScript, args, "", std::chrono::seconds(120));
  }

  // `bmctl masters --json` through the addresses the script wrote to master.addr.
  nlohmann::json Masters(const std::vector<std::string>& env = {}) {
    const std::string masters = ReadFile(run_dir_ + "/master.addr");
    std::vector<std::string> argv = env;
    argv.insert(argv.end(), {BinaryPath("bmctl"), "--master", masters.substr(0, masters.find('\n')),
                             "--json", "masters"});
    CommandResult listed = RunCommand("/usr/bin/env", argv);
    EXPECT_EQ(listed.exit_code, 0) << Describe(listed);
    return nlohmann::json::parse(listed.out, nullptr, /*allow_exceptions=*/false);
  }

  // The pids of the processes the script started, from its pid files.
  std::vector<pid_t> Pids() const {
    std::vector<pid_t> pids;
    for (const fs::directory_entry& e : fs::directory_iterator(run_dir_)) {
      if (e.path().extension() == ".pid") pids.push_back(std::stoi(ReadFile(e.path())));
    }
    return pids;
  }

  // Starts two masters and two workers; expects one leader and one standby in sync with it.
  void ExpectLeaderAndStandby(const std::vector<std::string>& extra_flags,
                              const std::vector<std::string>& bmctl_env) {
    std::vector<std::string> start = {"start", "--masters", "2", "--workers", "2"};
    start.insert(start.end(), extra_flags.begin(), extra_flags.end());
    CommandResult started = Script(start);
    ASSERT_EQ(started.exit_code, 0) << Describe(started);
    EXPECT_TRUE(fs::exists(run_dir_ + "/zookeeper/zoo.cfg"));
    EXPECT_NE(ReadFile(run_dir_ + "/zookeeper/zoo.cfg").find("tickTime=250"), std::string::npos);

    const nlohmann::json masters = Masters(bmctl_env);
    ASSERT_TRUE(masters.is_array() && masters.size() == 2) << masters.dump();
    EXPECT_EQ(masters[0]["role"], "leader") << masters.dump();  // the first one started leads
    EXPECT_EQ(masters[1]["role"], "standby") << masters.dump();
    EXPECT_EQ(masters[1]["in_sync"], true) << masters.dump();
    EXPECT_EQ(masters[0]["epoch"], masters[1]["epoch"]) << masters.dump();

    const std::vector<pid_t> pids = Pids();
    EXPECT_EQ(pids.size(), 5u);  // ZooKeeper, two masters, two workers
    CommandResult stopped = Script({"stop"});
    EXPECT_EQ(stopped.exit_code, 0) << Describe(stopped);
    EXPECT_NE(stopped.out.find("stopped 5 process(es)"), std::string::npos) << stopped.out;
    for (pid_t pid : pids) EXPECT_NE(::kill(pid, 0), 0) << "pid " << pid << " still runs";
  }

  TempDir dir_;
  const std::string run_dir_ = dir_.Sub("run");
  const int port_ = FreeScriptPort();
};

TEST_F(ClusterScriptTest, StartsTwoMastersAsLeaderAndStandby) {
  if (!ZooKeeperServer::Available()) GTEST_SKIP() << ZooKeeperServer::kNotInstalled;
  ExpectLeaderAndStandby({"--insecure"}, {});
}

// With keys, both masters hold the one master keypair and the standby fetches the leader's
// journal with it.
TEST_F(ClusterScriptTest, KeyedStandbyFollowsTheLeader) {
  if (!ZooKeeperServer::Available()) GTEST_SKIP() << ZooKeeperServer::kNotInstalled;
  const std::string keys = run_dir_ + "/keys";
  ExpectLeaderAndStandby({}, {"BLOCKMGR_KEY=" + keys + "/admin.key_secret",
                              "BLOCKMGR_MASTER_KEY=" + keys + "/master.key"});
}

TEST_F(ClusterScriptTest, OneMasterRunsWithoutZooKeeper) {
  CommandResult started = Script({"start", "--workers", "1", "--insecure"});
  ASSERT_EQ(started.exit_code, 0) << Describe(started);
  EXPECT_FALSE(fs::exists(run_dir_ + "/zookeeper"));
  EXPECT_EQ(ReadFile(run_dir_ + "/master.addr"), "tcp://127.0.0.1:" + std::to_string(port_) + "\n");
  CommandResult stopped = Script({"stop"});
  EXPECT_NE(stopped.out.find("stopped 2 process(es)"), std::string::npos) << Describe(stopped);
}

}  // namespace
}  // namespace bm::testing
