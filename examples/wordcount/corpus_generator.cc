#include "examples/wordcount/corpus_generator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <unordered_set>

namespace bm::wordcount {
namespace {

constexpr size_t kVocabularySize = 4000;
// Seeds the vocabulary's syllable draws; fixed so the vocabulary never depends on --seed.
constexpr uint64_t kVocabularySeed = 0x776f7264636f756eULL;

// The most frequent English words, roughly in frequency order, so the top of the counts reads
// like English.
constexpr const char* kCommonWords[] = {
    "the",    "of",      "and",       "to",    "a",      "in",    "is",     "it",     "you",
    "that",   "he",      "was",       "for",   "on",     "are",   "with",   "as",     "i",
    "his",    "they",    "be",        "at",    "one",    "have",  "this",   "from",   "or",
    "had",    "by",      "not",       "word",  "but",    "what",  "some",   "we",     "can",
    "out",    "other",   "were",      "all",   "there",  "when",  "up",     "use",    "your",
    "how",    "said",    "an",        "each",  "she",    "which", "do",     "their",  "time",
    "if",     "will",    "way",       "about", "many",   "then",  "them",   "write",  "would",
    "like",   "so",      "these",     "her",   "long",   "make",  "thing",  "see",    "him",
    "two",    "has",     "look",      "more",  "day",    "could", "go",     "come",   "did",
    "number", "sound",   "no",        "most",  "people", "my",    "over",   "know",   "water",
    "than",   "call",    "first",     "who",   "may",    "down",  "side",   "been",   "now",
    "find",   "any",     "new",       "work",  "part",   "take",  "get",    "place",  "made",
    "live",   "where",   "after",     "back",  "little", "only",  "round",  "man",    "year",
    "came",   "show",    "every",     "good",  "me",     "give",  "our",    "under",  "name",
    "very",   "through", "just",      "form",  "cache",  "block", "worker", "master", "disk",
    "memory", "data",    "partition", "spark",
};

constexpr const char* kOnsets[] = {"b",  "c",  "d",   "f",  "g",  "h",  "j",  "k",  "l",
                                   "m",  "n",  "p",   "r",  "s",  "t",  "v",  "w",  "z",
                                   "br", "ch", "cl",  "dr", "fl", "gr", "pl", "pr", "sh",
                                   "sl", "st", "str", "th", "tr", "wh", ""};
constexpr const char* kVowels[] = {"a",  "e",  "i",  "o",  "u",  "ai",
                                   "ea", "ee", "ie", "oo", "ou", "y"};
constexpr const char* kCodas[] = {"",   "",   "",   "n",  "r",  "s",  "t",  "l",  "m",
                                  "nd", "ng", "nt", "rd", "st", "ck", "ll", "ss", "th"};

template <size_t N>
const char* Pick(Xoshiro256& random, const char* const (&choices)[N]) {
  return choices[random.Below(N)];
}

std::string ErrnoText() { return std::strerror(errno); }

Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("writing " + path + " failed: " + ErrnoText());
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> BuiltInVocabulary() {
  std::vector<std::string> words(std::begin(kCommonWords), std::end(kCommonWords));
  std::unordered_set<std::string> seen(words.begin(), words.end());
  Xoshiro256 random(kVocabularySeed);
  while (words.size() < kVocabularySize) {
    // One to three syllables, two most often, like English words of middling frequency.
    const uint64_t syllables = 1 + random.Below(4) / 2 + random.Below(2) * random.Below(2);
    std::string word;
    for (uint64_t s = 0; s < syllables; ++s) {
      word += Pick(random, kOnsets);
      word += Pick(random, kVowels);
      word += Pick(random, kCodas);
    }
    if (word.size() >= 2 && seen.insert(word).second) words.push_back(std::move(word));
  }
  return words;
}

CorpusGenerator::CorpusGenerator(std::vector<std::string> vocabulary, uint64_t seed)
    : vocabulary_(std::move(vocabulary)), random_(seed) {
  BM_CHECK(!vocabulary_.empty());
  // Integer weights 2^32 / (rank + 1): a Zipf law with exponent 1, without floating point (whose
  // last bits could differ between math libraries and change the corpus).
  uint64_t total = 0;
  cumulative_.reserve(vocabulary_.size());
  for (size_t rank = 0; rank < vocabulary_.size(); ++rank) {
    total += (uint64_t{1} << 32) / (rank + 1);
    cumulative_.push_back(total);
  }
}

size_t CorpusGenerator::DrawWord() {
  const uint64_t point = random_.Below(cumulative_.back());
  return std::upper_bound(cumulative_.begin(), cumulative_.end(), point) - cumulative_.begin();
}

void CorpusGenerator::AppendLine(std::string& out) {
  const uint64_t length = 10 + random_.Below(6);
  for (uint64_t i = 0; i < length; ++i) {
    const std::string& word = vocabulary_[DrawWord()];
    if (i == 0) {
      // Capitalized, so counting has case to fold.
      out += static_cast<char>(word[0] - 'a' + 'A');
      out.append(word, 1);
    } else {
      out += ' ';
      out += word;
    }
    if (i + 1 < length && random_.Below(12) == 0) out += ',';
  }
  out += ".\n";
}

Result<uint64_t> WriteCorpus(const std::string& path, uint64_t size, uint64_t seed) {
  const std::string temp = path + ".partial";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot create " + temp + ": " + ErrnoText());
  CorpusGenerator generator(BuiltInVocabulary(), seed);
  constexpr size_t kFlushBytes = 4 << 20;
  std::string buffer;
  buffer.reserve(kFlushBytes + 256);
  uint64_t written = 0;
  Status status;
  while (status.ok() && written < size) {
    const size_t before = buffer.size();
    generator.AppendLine(buffer);
    written += buffer.size() - before;
    if (buffer.size() >= kFlushBytes || written >= size) {
      status = WriteAll(fd, buffer, temp);
      buffer.clear();
    }
  }
  if (::close(fd) != 0 && status.ok()) {
    status = InternalError("writing " + temp + " failed: " + ErrnoText());
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = InternalError("cannot rename " + temp + " to " + path + ": " + ErrnoText());
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  return written;
}

}  // namespace bm::wordcount
