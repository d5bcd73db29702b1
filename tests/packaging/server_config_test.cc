// Server flags from a config file (--config FILE) and from BLOCKMGR_* environment variables;
// the command line wins over the file, the file over the environment.

#include <gtest/gtest.h>

#include <fstream>

#include "blockmgr/client.h"
#include "tests/packaging/packaging_support.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

using std::chrono::seconds;

// Whether a master answers at `endpoint` (within a short deadline, polling).
bool MasterAnswers(const std::string& endpoint) {
  Client client(
      ClientOptions{.master_address = endpoint, .request_timeout = std::chrono::milliseconds(300)});
  return WaitFor([&] { return client.PingMaster().ok(); }, seconds(10));
}

class ServerConfigTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = dir_.Sub(name);
    std::ofstream(path) << text;
    return path;
  }
  // bm-master with `env` (NAME=value words) and `args`, logging to master.log.
  Process StartMaster(const std::vector<std::string>& env, const std::vector<std::string>& args) {
    std::vector<std::string> argv = env;
    argv.push_back(BinaryPath("bm-master"));
    argv.insert(argv.end(), args.begin(), args.end());
    return Process::Start("/usr/bin/env", argv, dir_.Sub("master.log"));
  }

  TempDir dir_;
};

TEST_F(ServerConfigTest, MasterTakesEveryFlagFromTheFile) {
  const std::string endpoint = LoopbackEndpoint(FreeLoopbackPort());
  const std::string config =
      WriteFile("master.toml", "# a comment\nlisten = \"" + endpoint +
                                   "\"\nheartbeat-timeout = 3\nstate-dir = \"" + dir_.Sub("state") +
                                   "\"\nlog-level = \"debug\"\n");
  Process master = StartMaster({}, {"--config", config});
  EXPECT_TRUE(MasterAnswers(endpoint));
  EXPECT_TRUE(std::filesystem::exists(dir_.Sub("state")));  // state-dir came from the file
}

TEST_F(ServerConfigTest, MasterTakesFlagsFromTheEnvironment) {
  const std::string endpoint = LoopbackEndpoint(FreeLoopbackPort());
  Process master = StartMaster({"BLOCKMGR_MASTER_LISTEN=" + endpoint}, {});
  EXPECT_TRUE(MasterAnswers(endpoint));
}

TEST_F(ServerConfigTest, CommandLineWinsOverFileAndFileOverEnvironment) {
  const std::string from_env = LoopbackEndpoint(FreeLoopbackPort());
  const std::string from_file = LoopbackEndpoint(FreeLoopbackPort());
  const std::string from_flag = LoopbackEndpoint(FreeLoopbackPort());
  const std::string config = WriteFile("master.toml", "listen = \"" + from_file + "\"\n");
  {
    Process master = StartMaster({"BLOCKMGR_MASTER_LISTEN=" + from_env},
                                 {"--config", config, "--listen", from_flag});
    EXPECT_TRUE(MasterAnswers(from_flag));
  }
  Process master = StartMaster({"BLOCKMGR_MASTER_LISTEN=" + from_env}, {"--config", config});
  EXPECT_TRUE(MasterAnswers(from_file));
}

TEST_F(ServerConfigTest, UnknownKeyOrMissingFileIsAClearError) {
  const std::string config =
      WriteFile("master.toml", "listen = \"tcp://127.0.0.1:1\"\nlisen = 2\n");
  CommandResult typo = RunCommand(BinaryPath("bm-master"), {"--config", config});
  EXPECT_EQ(typo.exit_code, 2) << Describe(typo);
  EXPECT_NE((typo.out + typo.err).find("lisen"), std::string::npos) << Describe(typo);

  CommandResult missing = RunCommand(BinaryPath("bm-master"), {"--config", dir_.Sub("none.toml")});
  EXPECT_EQ(missing.exit_code, 2) << Describe(missing);
  EXPECT_NE((missing.out + missing.err).find("none.toml"), std::string::npos) << Describe(missing);
}

TEST_F(ServerConfigTest, WorkerTakesItsRequiredFlagsFromFileAndEnvironment) {
  const std::string master_endpoint = LoopbackEndpoint(FreeLoopbackPort());
  Process master = StartMaster({}, {"--listen", master_endpoint});
  ASSERT_TRUE(MasterAnswers(master_endpoint));

  const std::string config =
      WriteFile("worker.toml", "master = \"" + master_endpoint + "\"\nlisten = \"" +
                                   LoopbackEndpoint(FreeLoopbackPort()) +
                                   "\"\nid = \"from-file\"\nhost = \"h1\"\n");
  Process worker = Process::Start(
      "/usr/bin/env",
      {"BLOCKMGR_WORKER_MEMORY=16MiB", "BLOCKMGR_WORKER_DISK_DIR=" + dir_.Sub("disk"),
       BinaryPath("bm-worker"), "--config", config},
      dir_.Sub("worker.log"));
  Client client(ClientOptions{.master_address = master_endpoint});
  bool listed = WaitFor(
      [&] {
        Result<std::vector<WorkerInfo>> workers = client.Workers();
        return workers.ok() && workers.value().size() == 1 &&
               workers.value()[0].id == "from-file" && workers.value()[0].host == "h1" &&
               workers.value()[0].memory_capacity == 16u << 20;
      },
      seconds(20));
  EXPECT_TRUE(listed);
  EXPECT_TRUE(std::filesystem::exists(dir_.Sub("disk")));
}

}  // namespace
}  // namespace bm::testing
