#pragma once

// A reproducible English-like text: words of a built-in vocabulary drawn with a Zipf
// distribution (the k-th most frequent word about 1/k as often as the first, as in real text),
// in sentence-like lines of 10 to 15 words. The same seed gives the same bytes everywhere: the
// vocabulary and the draws come from the fixed generators in prng.h and integer arithmetic only.

#include <cstdint>
#include <string>
#include <vector>

#include "blockmgr/status.h"
#include "examples/wordcount/prng.h"

namespace bm::wordcount {

// A few thousand distinct lowercase words, most frequent first: common English words, then
// words built from syllables. The same on every call.
std::vector<std::string> BuiltInVocabulary();

// Draws lines of text from a vocabulary. Not thread-safe.
class CorpusGenerator {
 public:
  CorpusGenerator(std::vector<std::string> vocabulary, uint64_t seed);

  // Appends one line ("Word word, word ... word.\n") to `out`.
  void AppendLine(std::string& out);

 private:
  // The index of a word drawn with probability proportional to 1 / (rank + 1).
  size_t DrawWord();

  std::vector<std::string> vocabulary_;
  // cumulative_[i] = sum of the integer Zipf weights of words 0..i.
  std::vector<uint64_t> cumulative_;
  Xoshiro256 random_;
};

// Writes at least `size` bytes of whole lines to `path` (the last line ends past `size`), via
// a temporary file renamed into place, so an interrupted run leaves no partial corpus.
// Returns the number of bytes written.
Result<uint64_t> WriteCorpus(const std::string& path, uint64_t size, uint64_t seed);

}  // namespace bm::wordcount
