// deploy/k8s: the manifests are valid YAML by yamllint, and every server flag and BLOCKMGR_*
// variable they use exists in the binaries' --help (so a renamed flag cannot leave the
// manifests starting servers that refuse their arguments).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"

namespace bm::testing {
namespace {

namespace fs = std::filesystem;

const std::string kManifests = std::string(BM_SOURCE_DIR) + "/deploy/k8s";

std::vector<std::string> ManifestFiles() {
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(kManifests)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  }
  return files;
}

std::string Help(const std::string& binary, const std::vector<std::string>& subcommand = {}) {
  std::vector<std::string> args = subcommand;
  args.push_back("--help");
  CommandResult help = RunCommand(BinaryPath(binary), args);
  EXPECT_EQ(help.exit_code, 0) << binary << "\n" << Describe(help);
  return help.out;
}

TEST(K8sManifestTest, ManifestsPassYamllint) {
  const std::string yamllint = FindTool({"/usr/bin/yamllint"});
  if (yamllint.empty())
    GTEST_SKIP() << "yamllint is not installed (deploy/install-deps.sh installs it)";
  std::vector<std::string> args = {"--strict", "-d",
                                   "{extends: default, rules: {line-length: {max: 100}}}"};
  const std::vector<std::string> files = ManifestFiles();
  ASSERT_GE(files.size(), 5u);
  args.insert(args.end(), files.begin(), files.end());
  CommandResult linted = RunCommand(yamllint, args);
  EXPECT_EQ(linted.exit_code, 0) << Describe(linted);
}

// Every `--flag` on a line of a server's command, and every BLOCKMGR_<SERVER>_* variable, is
// one the binary lists in --help.
TEST(K8sManifestTest, FlagsAndVariablesExistInTheBinaries) {
  const std::map<std::string, std::string> help = {
      {"bm-master", Help("bm-master")},
      {"bm-worker", Help("bm-worker")},
      {"bmctl", Help("bmctl")},
      {"bmctl decommission", Help("bmctl", {"decommission"})},
  };
  const std::regex flag(R"((^|[\s"])(--[a-z][a-z0-9-]*))");
  const std::regex variable(R"(BLOCKMGR_(MASTER|WORKER)_([A-Z0-9_]+))");
  int checked = 0;
  for (const std::string& file : ManifestFiles()) {
    // The binary a flag belongs to is the last one named before it in the file.
    const std::string text = ReadFile(file);
    std::string binary;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.find_first_not_of(' ') != std::string::npos &&
          line[line.find_first_not_of(' ')] == '#') {
        continue;  // comments may name kubectl's flags
      }
      if (line.find("bm-master") != std::string::npos) binary = "bm-master";
      if (line.find("bm-worker") != std::string::npos) binary = "bm-worker";
      if (line.find("bmctl") != std::string::npos) binary = "bmctl";
      if (binary == "bmctl" && line.find("decommission") != std::string::npos) {
        binary = "bmctl decommission";
      }
      for (std::sregex_iterator it(line.begin(), line.end(), flag), end; it != end; ++it) {
        const std::string name = (*it)[2];
        ASSERT_FALSE(binary.empty()) << file << ": " << name << " before any binary";
        const std::string& listed = help.at(binary);
        const bool known = listed.find(name + " ") != std::string::npos ||
                           listed.find(name + ",") != std::string::npos ||
                           listed.find(name + "\n") != std::string::npos ||
                           (binary == "bmctl decommission" &&
                            help.at("bmctl").find(name + " ") != std::string::npos);
        EXPECT_TRUE(known) << file << ": " << binary << " has no " << name;
        ++checked;
      }
      for (std::sregex_iterator it(line.begin(), line.end(), variable), end; it != end; ++it) {
        const std::string server = (*it)[1] == "MASTER" ? "bm-master" : "bm-worker";
        std::string name = "--" + std::string((*it)[2]);
        for (char& c : name) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
        EXPECT_NE(help.at(server).find(name + " "), std::string::npos)
            << file << ": " << (*it)[0] << " names no flag of " << server;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 15);  // the manifests do start servers with flags
}

// The manifests use what the issue of running on Kubernetes needs: the downward API for the
// worker's address and host, the memory limit, the drain on stop, the master's volume.
TEST(K8sManifestTest, WorkersUseTheDownwardApiAndDrainOnStop) {
  const std::string workers = ReadFile(kManifests + "/workers.yaml");
  EXPECT_NE(workers.find("fieldPath: status.podIP"), std::string::npos);
  EXPECT_NE(workers.find("fieldPath: spec.nodeName"), std::string::npos);
  EXPECT_NE(workers.find("resource: limits.memory"), std::string::npos);
  EXPECT_NE(workers.find("decommission"), std::string::npos);
  const std::string master = ReadFile(kManifests + "/master.yaml");
  EXPECT_NE(master.find("clusterIP: None"), std::string::npos);
  EXPECT_NE(master.find("volumeClaimTemplates"), std::string::npos);
  EXPECT_TRUE(fs::exists(std::string(BM_SOURCE_DIR) + "/deploy/image/Containerfile"));
  EXPECT_TRUE(fs::exists(kManifests + "/README.md"));
}

// A server listening beyond loopback refuses to start without --key or --insecure: each
// manifest's servers say which, and without keys a NetworkPolicy keeps other namespaces out.
TEST(K8sManifestTest, ServersOnThePodNetworkHaveKeysOrInsecureAndAPolicy) {
  bool any_insecure = false;
  for (const char* name : {"master.yaml", "workers.yaml"}) {
    const std::string manifest = ReadFile(kManifests + "/" + name);
    ASSERT_NE(manifest.find("--listen=tcp://0.0.0.0:"), std::string::npos) << name;
    const bool insecure = manifest.find("--insecure") != std::string::npos;
    const bool keyed = manifest.find("--key") != std::string::npos;
    EXPECT_TRUE(insecure != keyed) << name << ": needs exactly one of --insecure and --key";
    any_insecure = any_insecure || insecure;
  }
  if (any_insecure) {
    const std::string policy = ReadFile(kManifests + "/networkpolicy.yaml");
    EXPECT_NE(policy.find("kind: NetworkPolicy"), std::string::npos);
    EXPECT_NE(policy.find("namespace: blockmgr"), std::string::npos);
    EXPECT_NE(policy.find("- Ingress"), std::string::npos);
  }
}

// Standby masters: a ZooKeeper with short ticks, two masters each advertising its stable pod
// name, readiness from /readyz (only the leader is ready), workers given both masters.
TEST(K8sManifestTest, TwoMastersElectedThroughZooKeeper) {
  const std::string zookeeper = ReadFile(kManifests + "/zookeeper.yaml");
  EXPECT_NE(zookeeper.find("tickTime=500"), std::string::npos);
  EXPECT_NE(zookeeper.find("name: zookeeper"), std::string::npos);
  EXPECT_NE(zookeeper.find("volumeClaimTemplates"), std::string::npos);  // the epoch persists
  const std::string master = ReadFile(kManifests + "/master.yaml");
  EXPECT_NE(master.find("replicas: 2"), std::string::npos);
  EXPECT_NE(master.find("--zookeeper=zookeeper:2181"), std::string::npos);
  EXPECT_NE(master.find("fieldPath: metadata.name"), std::string::npos);
  EXPECT_NE(master.find("--advertise=tcp://$(POD_NAME).blockmgr-master.blockmgr.svc:7077"),
            std::string::npos);
  EXPECT_NE(master.find("--id=$(POD_NAME)"), std::string::npos);
  EXPECT_NE(master.find("path: /readyz"), std::string::npos);
  EXPECT_NE(master.find("publishNotReadyAddresses: true"), std::string::npos);
  const std::string workers = ReadFile(kManifests + "/workers.yaml");
  for (const char* pod : {"blockmgr-master-0", "blockmgr-master-1"}) {
    EXPECT_NE(workers.find(std::string(pod) + ".blockmgr-master.blockmgr.svc:7077"),
              std::string::npos)
        << pod;
  }
}

}  // namespace
}  // namespace bm::testing
