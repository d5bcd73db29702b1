#pragma once

// Word frequencies: counted from text, encoded compactly as a cached block, merged across
// partitions, and summarized (top words, a digest that is equal exactly when the counts are).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "blockmgr/status.h"

namespace bm::wordcount {

// A multiset of words. A value type; not thread-safe.
class WordCounts {
 public:
  // Counts the words of `text`: maximal runs of ASCII letters, lowercased. Everything else
  // (spaces, punctuation, digits, other bytes) separates words.
  static WordCounts Count(std::span<const std::byte> text);
  // Parses what Encode() wrote; kInvalidArgument if it is malformed.
  static Result<WordCounts> Decode(std::span<const std::byte> bytes);

  // "word\tcount\n" lines sorted by word: deterministic, so equal counts encode to equal bytes.
  std::vector<std::byte> Encode() const;
  // Adds `other`'s counts to these.
  void Merge(const WordCounts& other);
  // These counts cut into `parts` by word (a hash of it), so that each word's counts from every
  // partition meet in the same part: what a shuffle's map side sends to each reducer.
  std::vector<WordCounts> SplitByWord(uint32_t parts) const;

  uint64_t total() const;  // words counted, with repetitions
  size_t distinct() const { return counts_.size(); }
  uint64_t count(const std::string& word) const;
  // The `n` most frequent words, most frequent first (ties in word order).
  std::vector<std::pair<std::string, uint64_t>> Top(size_t n) const;
  // FNV-1a (64-bit) of Encode().
  uint64_t Digest() const;

 private:
  std::unordered_map<std::string, uint64_t> counts_;
};

}  // namespace bm::wordcount
