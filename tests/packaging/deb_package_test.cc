// `cpack -G DEB`: the server, library and dev packages, what is in them, and whether what they
// install fits together: the systemd units' ExecStart flags exist in the packaged binaries,
// the default config files parse, and (where systemd-analyze can run) the units verify.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "blockmgr/client.h"
#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

namespace fs = std::filesystem;

// The long flags (--name) in `text`.
std::vector<std::string> LongFlags(const std::string& text) {
  std::vector<std::string> flags;
  const std::regex flag(R"((^|\s)(--[a-z][a-z0-9-]*))");
  for (std::sregex_iterator it(text.begin(), text.end(), flag), end; it != end; ++it) {
    flags.push_back((*it)[2]);
  }
  return flags;
}

// The keys (`name = value` lines, comments included: they document optional settings) of a
// TOML file.
std::vector<std::string> ConfigKeys(const std::string& text) {
  std::vector<std::string> keys;
  const std::regex key(R"(^#?\s*([a-z][a-z0-9-]*)\s*=)", std::regex::multiline);
  for (std::sregex_iterator it(text.begin(), text.end(), key), end; it != end; ++it) {
    keys.push_back((*it)[1]);
  }
  return keys;
}

// The packages come from the DebPackageBuild test (cpack -G DEB into BM_TEST_PACKAGES_DIR),
// which ctest runs first; each test unpacks what it needs into a directory of its own.
class DebPackageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (FindTool({"/usr/bin/dpkg-deb"}).empty()) {
      GTEST_SKIP() << "dpkg-deb is not installed (not a Debian machine)";
    }
    ASSERT_TRUE(fs::exists(kPackages))
        << kPackages << " is missing: run the DebPackageBuild test first (ctest does)";
  }

  // The .deb whose package name is `name`.
  static std::string Package(const std::string& name) {
    for (const fs::directory_entry& e : fs::directory_iterator(kPackages)) {
      const std::string file = e.path().filename().string();
      if (file.starts_with(name + "_") && file.ends_with(".deb")) return e.path().string();
    }
    ADD_FAILURE() << "no package " << name << " in " << kPackages;
    return "";
  }
  static std::string Contents(const std::string& name) {
    CommandResult listed = RunCommand("/usr/bin/dpkg-deb", {"-c", Package(name)});
    EXPECT_EQ(listed.exit_code, 0) << Describe(listed);
    return listed.out;
  }
  static std::string Field(const std::string& name, const std::string& field) {
    CommandResult shown = RunCommand("/usr/bin/dpkg-deb", {"-f", Package(name), field});
    EXPECT_EQ(shown.exit_code, 0) << Describe(shown);
    return shown.out;
  }
  // Unpacks every package into one throwaway root (dpkg -x) and returns it.
  static std::string UnpackedRoot() {
    const std::string root = dir_->Sub("root");
    if (!fs::exists(root)) {
      for (const char* name : {"blockmgr", "libblockmgr-client0", "libblockmgr-client-dev"}) {
        CommandResult unpacked = RunCommand("/usr/bin/dpkg", {"-x", Package(name), root});
        EXPECT_EQ(unpacked.exit_code, 0) << Describe(unpacked);
      }
    }
    return root;
  }

  static inline const std::string kPackages = BM_TEST_PACKAGES_DIR;
  static TempDir* dir_;
};

TempDir* DebPackageTest::dir_ = nullptr;

TEST_F(DebPackageTest, ServerPackageHasBinariesUnitsAndConfig) {
  const std::string files = Contents("blockmgr");
  for (const char* path :
       {"./usr/bin/bm-master", "./usr/bin/bm-worker", "./usr/bin/bmctl",
        "./usr/lib/systemd/system/bm-master.service", "./usr/lib/systemd/system/bm-worker@.service",
        "./etc/blockmgr/master.toml", "./etc/blockmgr/worker.toml"}) {
    EXPECT_NE(files.find(std::string(path) + "\n"), std::string::npos) << path << "\n" << files;
  }
  EXPECT_EQ(files.find("include/"), std::string::npos) << files;
  // Runtime dependencies come from the binaries (dpkg-shlibdeps), e.g. ZeroMQ and RocksDB.
  const std::string depends = Field("blockmgr", "Depends");
  EXPECT_NE(depends.find("libzmq5"), std::string::npos) << depends;
  EXPECT_NE(depends.find("librocksdb"), std::string::npos) << depends;

  // Maintainer scripts create the system user; /etc files are conffiles (kept on upgrade).
  const std::string control = dir_->Sub("control");
  CommandResult extracted = RunCommand("/usr/bin/dpkg-deb", {"-e", Package("blockmgr"), control});
  ASSERT_EQ(extracted.exit_code, 0) << Describe(extracted);
  const std::string postinst = ReadFile(control + "/postinst");
  EXPECT_NE(postinst.find("useradd --system"), std::string::npos) << postinst;
  EXPECT_NE(postinst.find("/var/lib/blockmgr"), std::string::npos) << postinst;
  for (const char* script : {"postinst", "prerm", "postrm"}) {
    CommandResult syntax = RunCommand("/bin/sh", {"-n", control + "/" + script});
    EXPECT_EQ(syntax.exit_code, 0) << script << "\n" << Describe(syntax);
    EXPECT_TRUE((fs::status(control + "/" + script).permissions() & fs::perms::owner_exec) !=
                fs::perms::none)
        << script;
  }
  const std::string conffiles = ReadFile(control + "/conffiles");
  EXPECT_NE(conffiles.find("/etc/blockmgr/master.toml"), std::string::npos) << conffiles;
  EXPECT_NE(conffiles.find("/etc/blockmgr/worker.toml"), std::string::npos) << conffiles;
}

TEST_F(DebPackageTest, LibraryAndDevPackagesSplitRuntimeFromHeaders) {
  const std::string lib = Contents("libblockmgr-client0");
  EXPECT_NE(lib.find("libblockmgr_client.so.0"), std::string::npos) << lib;
  EXPECT_EQ(lib.find("include/"), std::string::npos) << lib;
  const std::string dev = Contents("libblockmgr-client-dev");
  for (const char* path : {"include/blockmgr/client.h", "pkgconfig/blockmgr.pc",
                           "cmake/blockmgr/blockmgrConfig.cmake", "libblockmgr_client.so ->"}) {
    EXPECT_NE(dev.find(path), std::string::npos) << path << "\n" << dev;
  }
  EXPECT_NE(Field("libblockmgr-client-dev", "Depends").find("libblockmgr-client0"),
            std::string::npos);
  // Packages linking the library depend on it through its shlibs; ldconfig runs on install.
  const std::string control = dir_->Sub("lib-control");
  CommandResult extracted =
      RunCommand("/usr/bin/dpkg-deb", {"-e", Package("libblockmgr-client0"), control});
  ASSERT_EQ(extracted.exit_code, 0) << Describe(extracted);
  EXPECT_NE(ReadFile(control + "/shlibs").find("libblockmgr_client 0 libblockmgr-client0"),
            std::string::npos);
  EXPECT_NE(ReadFile(control + "/postinst").find("ldconfig"), std::string::npos);
}

TEST_F(DebPackageTest, UnitsStartPackagedBinariesWithFlagsTheyAccept) {
  const std::string root = UnpackedRoot();
  for (const char* unit : {"bm-master.service", "bm-worker@.service"}) {
    const std::string text = ReadFile(root + "/usr/lib/systemd/system/" + unit);
    std::smatch exec;
    ASSERT_TRUE(std::regex_search(text, exec, std::regex(R"(\nExecStart=(\S+)([^\n]*))"))) << unit;
    const std::string binary = exec[1];
    ASSERT_TRUE(binary.starts_with("/usr/bin/")) << binary;
    ASSERT_TRUE(fs::exists(root + binary)) << binary;
    EXPECT_NE(text.find("User=blockmgr"), std::string::npos) << unit;
    CommandResult help = RunCommand(root + binary, {"--help"});
    ASSERT_EQ(help.exit_code, 0) << Describe(help);
    const std::vector<std::string> flags = LongFlags(exec[2]);
    EXPECT_FALSE(flags.empty()) << unit;
    for (const std::string& flag : flags) {
      EXPECT_NE(help.out.find(flag), std::string::npos) << unit << " uses " << flag;
    }
  }
  // Every key of the shipped config files is a flag of its binary.
  for (const auto& [file, binary] :
       {std::pair{"master.toml", "bm-master"}, std::pair{"worker.toml", "bm-worker"}}) {
    CommandResult help = RunCommand(root + "/usr/bin/" + binary, {"--help"});
    const std::vector<std::string> keys = ConfigKeys(ReadFile(root + "/etc/blockmgr/" + file));
    EXPECT_GE(keys.size(), 3u) << file;
    for (const std::string& key : keys) {
      EXPECT_NE(help.out.find("--" + key), std::string::npos) << file << " sets " << key;
    }
  }
}

// The packaged master starts from the packaged config file (with the address and journal
// overridden on the command line to stay on loopback and in the test's directory).
TEST_F(DebPackageTest, PackagedMasterRunsFromPackagedConfig) {
  const std::string root = UnpackedRoot();
  const std::string endpoint = LoopbackEndpoint(FreeLoopbackPort());
  Process master = Process::Start(root + "/usr/bin/bm-master",
                                  {"--config", root + "/etc/blockmgr/master.toml", "--listen",
                                   endpoint, "--state-dir", dir_->Sub("master-state")},
                                  dir_->Sub("master.log"));
  Client client(
      ClientOptions{.master_address = endpoint, .request_timeout = std::chrono::milliseconds(300)});
  EXPECT_TRUE(WaitFor([&] { return client.PingMaster().ok(); }, std::chrono::seconds(10)))
      << ReadFile(dir_->Sub("master.log"));
}

TEST_F(DebPackageTest, UnitsPassSystemdAnalyzeVerify) {
  const std::string analyze = FindTool({"/usr/bin/systemd-analyze", "/bin/systemd-analyze"});
  if (analyze.empty()) GTEST_SKIP() << "systemd-analyze is not installed; units not verified";
  const std::string root = UnpackedRoot();
  // verify checks ExecStart against the real file system, where the packages are not
  // installed: check copies of the units whose ExecStart points into the unpacked tree.
  const std::string units = dir_->Sub("units");
  fs::create_directories(units);
  std::vector<std::string> args = {"verify", "--man=no"};
  for (const auto& [unit, as] : {std::pair{"bm-master.service", "bm-master.service"},
                                 std::pair{"bm-worker@.service", "bm-worker@test.service"}}) {
    const std::string text =
        std::regex_replace(ReadFile(root + "/usr/lib/systemd/system/" + unit),
                           std::regex("ExecStart=/usr/bin/"), "ExecStart=" + root + "/usr/bin/");
    std::ofstream(units + "/" + as) << text;
    args.push_back(units + "/" + as);
  }
  CommandResult verified = RunCommand(analyze, args);
  if (verified.err.find("Failed to") != std::string::npos &&
      verified.err.find("bm-") == std::string::npos) {
    GTEST_SKIP() << "systemd-analyze cannot run here: " << verified.err;
  }
  EXPECT_EQ(verified.exit_code, 0) << Describe(verified);
  EXPECT_EQ(verified.err, "") << "warnings about the units";
}

}  // namespace
}  // namespace bm::testing
