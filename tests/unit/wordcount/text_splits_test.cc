#include "examples/wordcount/text_splits.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace bm::wordcount {
namespace {

using bm::testing::TempDir;
using bm::testing::WriteFile;

std::string AsString(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The partitions' texts, in order, for `text` cut into `n` partitions.
std::vector<std::string> Split(const std::string& text, uint32_t n) {
  TempDir dir;
  WriteFile(dir.Sub("input"), text);
  auto splits = TextSplits::Open(dir.Sub("input"), n);
  EXPECT_TRUE(splits.ok()) << splits.status().ToString();
  std::vector<std::string> parts;
  for (uint32_t i = 0; i < n; ++i) {
    auto part = (*splits)->Read(i);
    EXPECT_TRUE(part.ok()) << part.status().ToString();
    parts.push_back(part.ok() ? AsString(*part) : "");
  }
  return parts;
}

TEST(TextSplitsTest, EachPartitionOwnsTheLinesStartingInItsRange) {
  // 20 bytes, 2 partitions of 10: "bbbb" starts at 5 (first), "cccc\n" at 10 (second).
  EXPECT_EQ(Split("aaaa\nbbbb\ncccc\ndddd\n", 2),
            (std::vector<std::string>{"aaaa\nbbbb\n", "cccc\ndddd\n"}));
}

TEST(TextSplitsTest, ALineCrossingTheBoundaryIsReadWholeByTheFirstPartition) {
  EXPECT_EQ(Split("aaaaaaaaaaaaaa\nbb\n", 2),
            (std::vector<std::string>{"aaaaaaaaaaaaaa\n", "bb\n"}));
}

TEST(TextSplitsTest, APartitionInsideOneLongLineIsEmpty) {
  std::string text = std::string(100, 'x') + "\n" + "tail\n";
  EXPECT_EQ(Split(text, 4), (std::vector<std::string>{text.substr(0, 101), "", "", "tail\n"}));
}

TEST(TextSplitsTest, TheLastLineNeedsNoNewline) {
  EXPECT_EQ(Split("one\ntwo\nthree", 2), (std::vector<std::string>{"one\ntwo\n", "three"}));
}

TEST(TextSplitsTest, EveryLineIsInExactlyOnePartitionWhateverTheCount) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += std::string(1 + (i * 7919) % 37, 'a' + i % 26) + "\n";
  for (uint32_t n : {1u, 2u, 3u, 7u, 16u, 64u, 1000u}) {
    std::string joined;
    for (const std::string& part : Split(text, n)) joined += part;
    EXPECT_EQ(joined, text) << n << " partitions";
  }
}

TEST(TextSplitsTest, MissingFileIsNotFound) {
  auto splits = TextSplits::Open("/nonexistent/corpus.txt", 4);
  ASSERT_FALSE(splits.ok());
  EXPECT_EQ(splits.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace bm::wordcount
