#include "examples/wordcount/word_counts.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace bm::wordcount {
namespace {

bool IsAsciiLetter(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

std::vector<std::pair<std::string_view, uint64_t>> SortedByWord(
    const std::unordered_map<std::string, uint64_t>& counts) {
  std::vector<std::pair<std::string_view, uint64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

}  // namespace

WordCounts WordCounts::Count(std::span<const std::byte> text) {
  WordCounts result;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    // find first: a repeated word costs a lookup, not a key copy.
    auto it = result.counts_.find(word);
    if (it != result.counts_.end()) {
      ++it->second;
    } else {
      result.counts_.emplace(word, 1);
    }
    word.clear();
  };
  for (std::byte b : text) {
    const auto c = static_cast<unsigned char>(b);
    if (IsAsciiLetter(c)) {
      word += static_cast<char>(c | 0x20);
    } else {
      flush();
    }
  }
  flush();
  return result;
}

Result<WordCounts> WordCounts::Decode(std::span<const std::byte> bytes) {
  WordCounts result;
  std::string_view rest(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) {
      return InvalidArgumentError("word counts: the last line has no newline");
    }
    std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline + 1);
    const size_t tab = line.find('\t');
    if (tab == 0 || tab == std::string_view::npos) {
      return InvalidArgumentError("word counts: malformed line '" + std::string(line) + "'");
    }
    uint64_t count = 0;
    const char* digits = line.data() + tab + 1;
    const char* line_end = line.data() + line.size();
    auto [ptr, error] = std::from_chars(digits, line_end, count);
    if (error != std::errc() || ptr != line_end || digits == line_end) {
      return InvalidArgumentError("word counts: bad count in line '" + std::string(line) + "'");
    }
    result.counts_[std::string(line.substr(0, tab))] += count;
  }
  return result;
}

std::vector<std::byte> WordCounts::Encode() const {
  std::string text;
  for (const auto& [word, count] : SortedByWord(counts_)) {
    text += word;
    text += '\t';
    text += std::to_string(count);
    text += '\n';
  }
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  return bytes;
}

void WordCounts::Merge(const WordCounts& other) {
  for (const auto& [word, count] : other.counts_) counts_[word] += count;
}

uint64_t WordCounts::total() const {
  uint64_t total = 0;
  for (const auto& [word, count] : counts_) total += count;
  return total;
}

uint64_t WordCounts::count(const std::string& word) const {
  auto it = counts_.find(word);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::pair<std::string, uint64_t>> WordCounts::Top(size_t n) const {
  std::vector<std::pair<std::string, uint64_t>> all(counts_.begin(), counts_.end());
  auto more_frequent = [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  };
  n = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + n, all.end(), more_frequent);
  all.resize(n);
  return all;
}

std::vector<WordCounts> WordCounts::SplitByWord(uint32_t parts) const {
  std::vector<WordCounts> out(std::max<uint32_t>(parts, 1));
  for (const auto& [word, count] : counts_) {
    uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a: the same word, the same part, everywhere
    for (char c : word) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ULL;
    }
    out[hash % out.size()].counts_.emplace(word, count);
  }
  return out;
}

uint64_t WordCounts::Digest() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::byte b : Encode()) {
    hash ^= static_cast<uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace bm::wordcount
