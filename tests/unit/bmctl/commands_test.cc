#include "bmctl/commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bm {
namespace {

// Parses `args` (the words after "bmctl", as in argv) for one command and returns what its
// Validate says, as bmctl does before contacting a master.
Status ParseAndValidate(std::function<std::unique_ptr<BmctlCommand>()> make,
                        std::vector<std::string> args) {
  CLI::App app{"bmctl"};
  app.require_subcommand(1);
  std::unique_ptr<BmctlCommand> command = make();
  command->AddTo(app);
  std::reverse(args.begin(), args.end());  // CLI11 takes the words last first
  app.parse(args);
  return command->Validate();
}

constexpr char kVerifyTargets[] = "verify takes BLOCK_ID..., --rdd N or --worker ID (one of them)";

TEST(BmctlCommandsTest, VerifyTakesBlocksAnRddOrAWorker) {
  EXPECT_TRUE(ParseAndValidate(MakeVerifyCommand, {"verify", "rdd_1_0", "rdd_1_1"}).ok());
  EXPECT_TRUE(ParseAndValidate(MakeVerifyCommand, {"verify", "--rdd", "7"}).ok());
  EXPECT_TRUE(ParseAndValidate(MakeVerifyCommand, {"verify", "--worker", "w1"}).ok());
}

TEST(BmctlCommandsTest, VerifyRefusesNoTargetOrMoreThanOne) {
  const std::vector<std::vector<std::string>> refused = {
      {"verify"},
      {"verify", "rdd_1_0", "--rdd", "1"},
      {"verify", "--rdd", "1", "--worker", "w1"},
      {"verify", "rdd_1_0", "--worker", "w1"},
  };
  for (const std::vector<std::string>& args : refused) {
    Status valid = ParseAndValidate(MakeVerifyCommand, args);
    EXPECT_EQ(valid.code(), StatusCode::kInvalidArgument) << testing::PrintToString(args);
    EXPECT_EQ(valid.message(), kVerifyTargets) << testing::PrintToString(args);
  }
}

TEST(BmctlCommandsTest, VerifyNamesABadRddIdOrAnEmptyWorker) {
  EXPECT_EQ(ParseAndValidate(MakeVerifyCommand, {"verify", "--rdd", "x"}).message(),
            "bad RDD id 'x': expected a non-negative integer");
  EXPECT_EQ(ParseAndValidate(MakeVerifyCommand, {"verify", "--worker", ""}).message(),
            "--worker needs a worker id");
  EXPECT_FALSE(ParseAndValidate(MakeVerifyCommand, {"verify", "rdd_1_0", "rdd_x"}).ok());
}

TEST(BmctlCommandsTest, PutChecksBlockLevelAndWorker) {
  EXPECT_TRUE(
      ParseAndValidate(MakePutCommand, {"put", "rdd_1_0", "f", "--level", "MEMORY_ONLY_2"}).ok());
  EXPECT_FALSE(ParseAndValidate(MakePutCommand, {"put", "rdd_x", "f"}).ok());
  EXPECT_FALSE(ParseAndValidate(MakePutCommand, {"put", "rdd_1_0", "f", "--level", "FAST"}).ok());
  EXPECT_EQ(ParseAndValidate(MakePutCommand, {"put", "rdd_1_0", "f", "--worker", ""}).message(),
            "--worker needs a worker id");
}

TEST(BmctlCommandsTest, PutChecksItsComputeCost) {
  EXPECT_TRUE(
      ParseAndValidate(MakePutCommand, {"put", "rdd_1_0", "f", "--compute-cost", "2.5s"}).ok());
  Status bad = ParseAndValidate(MakePutCommand, {"put", "rdd_1_0", "f", "--compute-cost", "2x"});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("bad compute cost '2x'"), std::string::npos) << bad.message();
}

TEST(BmctlCommandsTest, GetOutputNeedsAFileName) {
  EXPECT_TRUE(ParseAndValidate(MakeGetCommand, {"get", "rdd_1_0", "-o", "out"}).ok());
  EXPECT_EQ(ParseAndValidate(MakeGetCommand, {"get", "rdd_1_0", "-o", ""}).message(),
            "--output needs a file name");
}

TEST(BmctlCommandsTest, RddIdsAreNonNegativeIntegers) {
  EXPECT_TRUE(ParseAndValidate(MakeBlocksCommand, {"blocks"}).ok());
  EXPECT_TRUE(ParseAndValidate(MakeBlocksCommand, {"blocks", "--rdd", "3"}).ok());
  EXPECT_FALSE(ParseAndValidate(MakeBlocksCommand, {"blocks", "--rdd", "-1"}).ok());
  EXPECT_TRUE(ParseAndValidate(MakeRmRddCommand, {"rm-rdd", "3"}).ok());
  EXPECT_FALSE(ParseAndValidate(MakeRmRddCommand, {"rm-rdd", "x"}).ok());
}

TEST(BmctlCommandsTest, BlockListsNameTheBadId) {
  EXPECT_TRUE(ParseAndValidate(MakeRmCommand, {"rm", "rdd_1_0", "broadcast_2"}).ok());
  EXPECT_EQ(ParseAndValidate(MakeRmCommand, {"rm", "rdd_1_0", "bogus"}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(ParseAndValidate(MakeRmCommand, {"rm", "rdd_1_0", "bogus"}).message().find("bogus"),
            std::string::npos);
  EXPECT_NE(ParseAndValidate(MakeLocationsCommand, {"locations", "bogus"}).message().find("bogus"),
            std::string::npos);
}

TEST(BmctlCommandsTest, OnlyKeygenRunsWithoutAMaster) {
  for (const std::unique_ptr<BmctlCommand>& command : MakeBmctlCommands()) {
    CLI::App app{"bmctl"};
    const std::string name = command->AddTo(app)->get_name();
    EXPECT_EQ(command->NeedsMaster(), name != "keygen") << name;
  }
}

}  // namespace
}  // namespace bm
