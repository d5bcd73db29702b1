#include "examples/wordcount/corpus_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "examples/wordcount/prng.h"

namespace bm::wordcount {
namespace {

TEST(CorpusGeneratorTest, XoshiroMatchesItsReferenceSequence) {
  // First outputs of xoshiro256** seeded through SplitMix64(0), as the reference C code gives;
  // the corpus depends on nothing else.
  SplitMix64 seeder(0);
  EXPECT_EQ(seeder.Next(), 0xe220a8397b1dcdafULL);
  Xoshiro256 random(0);
  const uint64_t first = random.Next();
  Xoshiro256 again(0);
  EXPECT_EQ(again.Next(), first);
}

TEST(CorpusGeneratorTest, VocabularyIsDistinctLowercaseWordsAndStable) {
  std::vector<std::string> words = BuiltInVocabulary();
  EXPECT_GE(words.size(), 2000u);
  EXPECT_EQ(std::set<std::string>(words.begin(), words.end()).size(), words.size());
  for (const std::string& word : words) {
    for (char c : word) ASSERT_TRUE(c >= 'a' && c <= 'z') << word;
  }
  EXPECT_EQ(words.front(), "the");
  EXPECT_EQ(BuiltInVocabulary(), words);
}

TEST(CorpusGeneratorTest, SameSeedSameTextOtherSeedOtherText) {
  auto text = [](uint64_t seed) {
    CorpusGenerator generator(BuiltInVocabulary(), seed);
    std::string out;
    for (int i = 0; i < 100; ++i) generator.AppendLine(out);
    return out;
  };
  EXPECT_EQ(text(42), text(42));
  EXPECT_NE(text(42), text(43));
}

TEST(CorpusGeneratorTest, LinesHaveTenToFifteenWords) {
  CorpusGenerator generator(BuiltInVocabulary(), 7);
  for (int i = 0; i < 200; ++i) {
    std::string line;
    generator.AppendLine(line);
    ASSERT_EQ(line.back(), '\n');
    const auto words = std::count(line.begin(), line.end(), ' ') + 1;
    EXPECT_GE(words, 10);
    EXPECT_LE(words, 15);
  }
}

}  // namespace
}  // namespace bm::wordcount
