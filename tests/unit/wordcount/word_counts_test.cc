#include "examples/wordcount/word_counts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace bm::wordcount {
namespace {

std::vector<std::byte> Bytes(const std::string& text) {
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

TEST(WordCountsTest, CountsLettersOnlyAndFoldsCase) {
  WordCounts counts = WordCounts::Count(Bytes("The cat, the DOG.\nthe-cat 42 x"));
  EXPECT_EQ(counts.count("the"), 3u);
  EXPECT_EQ(counts.count("cat"), 2u);
  EXPECT_EQ(counts.count("dog"), 1u);
  EXPECT_EQ(counts.count("x"), 1u);
  EXPECT_EQ(counts.total(), 7u);
  EXPECT_EQ(counts.distinct(), 4u);
}

TEST(WordCountsTest, EncodesSortedLinesAndDecodesThemBack) {
  WordCounts counts = WordCounts::Count(Bytes("b a b"));
  std::vector<std::byte> encoded = counts.Encode();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(encoded.data()), encoded.size()),
            "a\t1\nb\t2\n");
  Result<WordCounts> decoded = WordCounts::Decode(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->Digest(), counts.Digest());
}

TEST(WordCountsTest, DecodeRejectsMalformedInput) {
  for (const char* bad : {"a\t1", "a1\n", "\t1\n", "a\t\n", "a\t1x\n", "a\t-1\n"}) {
    EXPECT_FALSE(WordCounts::Decode(Bytes(bad)).ok()) << bad;
  }
}

TEST(WordCountsTest, MergedPartitionsEqualTheWholeText) {
  WordCounts merged = WordCounts::Count(Bytes("a b c a\n"));
  merged.Merge(WordCounts::Count(Bytes("c c d\n")));
  EXPECT_EQ(merged.Digest(), WordCounts::Count(Bytes("a b c a\nc c d\n")).Digest());
  EXPECT_EQ(merged.Top(2), (std::vector<std::pair<std::string, uint64_t>>{{"c", 3}, {"a", 2}}));
}

}  // namespace
}  // namespace bm::wordcount
