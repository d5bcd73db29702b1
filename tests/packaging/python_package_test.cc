// The Python package as a Python user installs it: `pip install ./python` into a fresh venv
// (python/pyproject.toml; its build backend compiles the module with the project's CMake), with
// no package index (PIP_NO_INDEX: nothing leaves the machine, and a build that needed a
// download fails here as it would offline). The installed module then talks to a real cluster;
// in a venv that also sees Debian's packages, blockmgr.dask caches a Dask bag in it.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/packaging/packaging_support.h"
#include "tests/support/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace bm::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";
// A build of the module compiles the client library: minutes on two cores without ccache.
constexpr std::chrono::seconds kBuildTimeout(1500);

// Quoted for /bin/sh.
std::string Quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

class PythonPackageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kPython)) GTEST_SKIP() << kPython << " is not installed";
    // Debian's python3 makes venvs (with pip in them) only with python3-venv.
    CommandResult venv_module = RunCommand(kPython, {"-c", "import ensurepip, venv"});
    if (venv_module.exit_code != 0) {
      GTEST_SKIP() << "python3-venv is not installed (deploy/install-test-deps.sh installs it)";
    }
  }

  // A new venv in the test's folder; `system_site_packages` lets it see Debian's packages.
  std::string MakeVenv(const std::string& name, bool system_site_packages) {
    const std::string venv = dir_.Sub(name);
    std::vector<std::string> args = {"-m", "venv"};
    if (system_site_packages) args.push_back("--system-site-packages");
    args.push_back(venv);
    CommandResult made = RunCommand(kPython, args, "", std::chrono::seconds(300));
    EXPECT_EQ(made.exit_code, 0) << Describe(made);
    return venv;
  }

  // Runs `command` with pip kept off the network. The CMake build folder of the module is kept
  // beside this build's (BM_BUILD_DIR-python-package) rather than in a temporary one: at the
  // same depth, its compiler commands are those of this build, so ccache serves them, and the
  // next run reuses its objects. The tests that build share it (RESOURCE_LOCK in CMake).
  // `timeout` ends pip with its whole process group (the build backend, cmake, the compilers)
  // before the test gives up on the shell, which alone would leave them building.
  static CommandResult Pip(const std::string& venv, const std::string& arguments) {
    return Shell("PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 BLOCKMGR_BUILD_DIR=" +
                     Quoted(std::string(BM_BUILD_DIR) + "-python-package") + " timeout -k 10 " +
                     std::to_string(kBuildTimeout.count() - 60) + " " + Quoted(venv + "/bin/pip") +
                     " " + arguments + " 2>&1",
                 kBuildTimeout);
  }

  static std::string PythonFolder() { return std::string(BM_SOURCE_DIR) + "/python"; }

  TempDir dir_;
};

TEST_F(PythonPackageTest, PipInstallOfThePythonFolderWorksInAFreshVenv) {
  const std::string venv = MakeVenv("venv", /*system_site_packages=*/false);
  ASSERT_FALSE(HasFailure());
  CommandResult installed = Pip(venv, "install " + Quoted(PythonFolder()));
  ASSERT_EQ(installed.exit_code, 0) << Describe(installed);

  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkers(1));
  // The module comes from the venv (not a build folder), and its client stores and reads a
  // block; blockmgr.dask imports without Dask (it imports Dask when used).
  const std::string script =
      "import sys, blockmgr, blockmgr.dask\n"
      "assert blockmgr.__file__.startswith(sys.prefix + '/'), blockmgr.__file__\n"
      "client = blockmgr.Client(sys.argv[1], timeout=10.0)\n"
      "data = bytes(range(256)) * 4096\n"
      "client.put('rdd_3_0', data, 'MEMORY_AND_DISK')\n"
      "assert bytes(client.get('rdd_3_0')) == data\n"
      "print('stored', len(data))\n";
  CommandResult ran = RunCommand(venv + "/bin/python", {"-c", script, cluster.master_endpoint()},
                                 "", std::chrono::seconds(60));
  ASSERT_EQ(ran.exit_code, 0) << Describe(ran);
  EXPECT_NE(ran.out.find("stored 1048576"), std::string::npos) << ran.out;
  // The cluster holds what the venv's client put.
  CommandResult located = cluster.Bmctl({"locations", "rdd_3_0"});
  EXPECT_EQ(located.exit_code, 0) << Describe(located);
}

TEST_F(PythonPackageTest, AWheelInstallsIntoAVenvWithDebiansPackagesWhereDaskCachesABag) {
  if (RunCommand(kPython, {"-c", "import distributed, pytest, numpy"}).exit_code != 0) {
    GTEST_SKIP() << "python3-distributed, python3-pytest or python3-numpy is not installed "
                    "(deploy/install-deps.sh installs them)";
  }
  const std::string venv = MakeVenv("venv-system", /*system_site_packages=*/true);
  ASSERT_FALSE(HasFailure());
  const std::string wheels = dir_.Sub("wheels");
  CommandResult built =
      Pip(venv, "wheel --no-deps -w " + Quoted(wheels) + " " + Quoted(PythonFolder()));
  ASSERT_EQ(built.exit_code, 0) << Describe(built);
  std::vector<std::string> found;
  for (const fs::directory_entry& entry : fs::directory_iterator(wheels)) {
    found.push_back(entry.path().string());
  }
  ASSERT_EQ(found.size(), 1u) << "pip wheel left " << found.size() << " files in " << wheels;
  EXPECT_TRUE(fs::path(found[0]).filename().string().starts_with("blockmgr-")) << found[0];
  CommandResult installed = Pip(venv, "install " + Quoted(found[0]));
  ASSERT_EQ(installed.exit_code, 0) << Describe(installed);

  // python/tests' Dask test, run by the venv's interpreter on the installed package: only the
  // tests' own folder (conftest.py, dask_tasks.py) is on PYTHONPATH.
  const std::string tests = PythonFolder() + "/tests";
  CommandResult ran = Shell(
      "cd " + Quoted(dir_.Sub("")) + " && export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=" +
          Quoted(tests) + " BM_BIN_DIR=" + Quoted(fs::path(BinaryPath("bm-master")).parent_path()) +
          " && " + Quoted(venv + "/bin/python") +
          " -c 'import sys, blockmgr; assert blockmgr.__file__.startswith(sys.prefix + \"/\"), "
          "blockmgr.__file__' && " +
          Quoted(venv + "/bin/python") + " -m pytest -q -rs -p no:cacheprovider " +
          Quoted(tests + "/test_dask.py") +
          " -k test_persist_computes_each_partition_once_then_reads_the_cache 2>&1",
      std::chrono::seconds(300));
  EXPECT_EQ(ran.exit_code, 0) << Describe(ran);
  EXPECT_NE(ran.out.find("1 passed"), std::string::npos) << ran.out;
}

}  // namespace
}  // namespace bm::testing
