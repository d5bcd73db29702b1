// bm-worker restarts itself once at start-up with glibc's malloc asking for transparent huge
// pages for its heaps (common/core/allocator.h RestartWithHugePageHeaps): a worker filling its
// memory tier otherwise pays a page fault per 4 KiB of every block it receives.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"

namespace bm::testing {
namespace {

// The value of GLIBC_TUNABLES in a running process's environment, if set.
std::optional<std::string> TunablesOf(pid_t pid) {
  std::istringstream environ(ReadFile("/proc/" + std::to_string(pid) + "/environ"));
  std::string entry;
  while (std::getline(environ, entry, '\0')) {
    if (entry.starts_with("GLIBC_TUNABLES=")) return entry.substr(15);
  }
  return std::nullopt;
}

bool ThpModeIsMadvise() {
  const std::string mode = "/sys/kernel/mm/transparent_hugepage/enabled";
  return std::filesystem::exists(mode) && ReadFile(mode).find("[madvise]") != std::string::npos;
}

// Sets an environment variable for the processes a test starts; restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(HugePageHeapsTest, AWorkerRunsWithHugePageHeapsAndServesAsBefore) {
  if (!ThpModeIsMadvise()) GTEST_SKIP() << "transparent huge pages are not in madvise mode here";
  if (getenv("GLIBC_TUNABLES")) GTEST_SKIP() << "GLIBC_TUNABLES is set for the test itself";
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(WorkerSpec{.id = "w1", .memory = "256MiB"}));
  // The same process (the restart is an exec in place), now with the setting.
  EXPECT_EQ(TunablesOf(cluster.worker_process("w1").pid()), "glibc.malloc.hugetlb=1");

  Client client(cluster.ClientOptionsFor());
  const std::vector<std::byte> data = RandomByteVector(8 << 20, 11);
  ASSERT_TRUE(client.Put(BlockId::Rdd(1, 0), data, StorageLevel::kMemoryOnly).ok());
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

TEST(HugePageHeapsTest, AnOperatorsOwnSettingIsKept) {
  ScopedEnv off("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0");
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorker(WorkerSpec{.id = "w1", .memory = "64MiB"}));
  EXPECT_EQ(TunablesOf(cluster.worker_process("w1").pid()), "glibc.malloc.hugetlb=0");
}

}  // namespace
}  // namespace bm::testing
