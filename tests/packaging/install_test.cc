// `cmake --install` as an outside project sees it: only the public headers, a CMake package a
// project finds with find_package(blockmgr CONFIG), and a pkg-config file; the consumer example
// (examples/consumer) builds against the installed prefix and caches a partition in a real
// cluster.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "blockmgr/client.h"
#include "tests/packaging/packaging_support.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

namespace fs = std::filesystem;

class InstallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CommandResult installed = InstallInto(prefix());
    ASSERT_EQ(installed.exit_code, 0) << Describe(installed);
  }
  std::string prefix() const { return dir_.Sub("prefix"); }
  fs::path include_dir() const { return fs::path(prefix()) / "include" / "blockmgr"; }

  TempDir dir_;
};

TEST_F(InstallTest, PutsBinariesLibraryAndPackageFilesUnderThePrefix) {
  const fs::path root(prefix());
  for (const char* binary : {"bin/bm-master", "bin/bm-worker", "bin/bmctl"}) {
    EXPECT_TRUE(fs::exists(root / binary)) << binary;
  }
  EXPECT_TRUE(fs::is_symlink(root / "lib/libblockmgr_client.so"));
  EXPECT_TRUE(fs::exists(root / "lib/libblockmgr_client.so.0"));
  EXPECT_TRUE(fs::exists(root / "lib/cmake/blockmgr/blockmgrConfig.cmake"));
  EXPECT_TRUE(fs::exists(root / "lib/cmake/blockmgr/blockmgrConfigVersion.cmake"));
  EXPECT_TRUE(fs::exists(root / "lib/pkgconfig/blockmgr.pc"));
  EXPECT_TRUE(fs::exists(include_dir() / "client.h"));
  // The Debian system files are for packages only: a prefix install never writes /etc.
  EXPECT_FALSE(fs::exists(root / "etc"));
  EXPECT_FALSE(fs::exists(root / "lib/systemd"));
}

// Every installed header includes only other installed headers and the standard library, and
// compiles on its own: no internal header is reachable from <blockmgr/...>.
TEST_F(InstallTest, PublicHeadersAreSelfContained) {
  const std::regex include_line(R"(#include\s*([<"])([^>"]+)[>"])");
  int headers = 0;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(prefix() + "/include")) {
    if (!entry.is_regular_file()) continue;
    ++headers;
    const std::string text = ReadFile(entry.path());
    for (std::sregex_iterator it(text.begin(), text.end(), include_line), end; it != end; ++it) {
      const std::string included = (*it)[2];
      const bool project = included.find('/') != std::string::npos;
      if (project) {
        EXPECT_TRUE(included.starts_with("blockmgr/") &&
                    fs::exists(fs::path(prefix()) / "include" / included))
            << entry.path() << " includes " << included;
      }
    }
    CommandResult compiled =
        RunCommand(BM_CXX_COMPILER, {"-std=c++20", "-fsyntax-only", "-x", "c++", "-I",
                                     prefix() + "/include", entry.path().string()});
    EXPECT_EQ(compiled.exit_code, 0) << entry.path() << "\n" << Describe(compiled);
  }
  EXPECT_GE(headers, 5);
  EXPECT_TRUE(fs::exists(include_dir() / "dataset.h"));
  EXPECT_FALSE(fs::exists(include_dir() / "location_cache.h"));
}

TEST_F(InstallTest, ConsumerProjectBuildsAgainstThePrefixAndCachesAPartition) {
  const std::string build = dir_.Sub("consumer-build");
  CommandResult configured =
      RunCommand(BM_CMAKE_COMMAND,
                 {"-S", std::string(BM_SOURCE_DIR) + "/examples/consumer", "-B", build,
                  "-DCMAKE_PREFIX_PATH=" + prefix(), "-DCMAKE_CXX_FLAGS=" BM_CONSUMER_FLAGS,
                  "-DCMAKE_CXX_COMPILER=" BM_CXX_COMPILER},
                 "", std::chrono::seconds(300));
  ASSERT_EQ(configured.exit_code, 0) << Describe(configured);
  CommandResult built =
      RunCommand(BM_CMAKE_COMMAND, {"--build", build}, "", std::chrono::seconds(300));
  ASSERT_EQ(built.exit_code, 0) << Describe(built);
  // It compiled against the installed headers and links the installed shared library.
  CommandResult needed = Shell("readelf -d " + build + "/blockmgr-consumer");
  if (needed.exit_code == 0) {
    EXPECT_NE(needed.out.find("libblockmgr_client.so.0"), std::string::npos) << needed.out;
  }

  LocalCluster cluster;
  cluster.StartMaster();
  cluster.StartWorkers(1);
  if (std::string(BM_CONSUMER_FLAGS).find("thread") != std::string::npos) {
    // ThreadSanitizer reads the suppressions for libzmq's own threads (common/net/transport.cc)
    // from the executable only: the consumer is handed the same list through TSAN_OPTIONS.
    const std::string suppressions = dir_.Sub("tsan.supp");
    std::ofstream(suppressions) << "called_from_lib:libzmq.so\ncalled_from_lib:libsodium.so\n";
    setenv("TSAN_OPTIONS", ("suppressions=" + suppressions).c_str(), 1);
  }
  CommandResult ran = RunCommand(build + "/blockmgr-consumer", {cluster.master_endpoint(), "7"});
  ASSERT_EQ(ran.exit_code, 0) << Describe(ran);
  EXPECT_NE(ran.out.find("computed 1 time(s), 1 hit(s)"), std::string::npos) << ran.out;

  // The partition is in the cluster, as this tree's own client sees it.
  Client client(cluster.ClientOptionsFor());
  Result<std::vector<std::byte>> cached = client.Get(BlockId::Rdd(7, 0));
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_EQ(cached.value().size(), 8000u);
}

TEST_F(InstallTest, PkgConfigFlagsCompileAOneFileProgram) {
  const std::string pkg_config = FindTool({"/usr/bin/pkg-config", "/usr/bin/pkgconf"});
  if (pkg_config.empty()) GTEST_SKIP() << "pkg-config is not installed";
  const std::string source = dir_.Sub("one.cc");
  std::ofstream(source) << R"(#include <blockmgr/client.h>
#include <cstdio>
int main() {
  bm::Result<bm::BlockId> id = bm::BlockId::Parse("rdd_3_4");
  if (!id.ok()) return 1;
  bm::ClientOptions options{.master_address = "tcp://127.0.0.1:1"};
  std::printf("%s %s\n", id.value().ToString().c_str(),
              std::string(bm::StorageLevelName(bm::StorageLevel::kDiskOnly2)).c_str());
  return 0;
}
)";
  const std::string program = dir_.Sub("one");
  CommandResult flags = Shell("PKG_CONFIG_PATH=" + prefix() + "/lib/pkgconfig " + pkg_config +
                              " --cflags --libs blockmgr");
  ASSERT_EQ(flags.exit_code, 0) << Describe(flags);
  EXPECT_NE(flags.out.find("-lblockmgr_client"), std::string::npos) << flags.out;
  CommandResult compiled =
      Shell(std::string(BM_CXX_COMPILER) + " -std=c++20 " BM_CONSUMER_FLAGS " " + source + " -o " +
            program + " $(PKG_CONFIG_PATH=" + prefix() + "/lib/pkgconfig " + pkg_config +
            " --cflags --libs blockmgr) -Wl,-rpath," + prefix() + "/lib");
  ASSERT_EQ(compiled.exit_code, 0) << Describe(compiled);
  CommandResult ran = RunCommand(program, {});
  ASSERT_EQ(ran.exit_code, 0) << Describe(ran);
  EXPECT_EQ(ran.out, "rdd_3_4 DISK_ONLY_2\n");
}

}  // namespace
}  // namespace bm::testing
