#include "tests/support/files.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace bm::testing {

std::string RandomBytes(size_t size, uint64_t seed) {
  std::string out(size, '\0');
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < size; ++i) out[i] = static_cast<char>(rng());
  return out;
}

std::vector<std::byte> RandomByteVector(size_t size, uint64_t seed) {
  std::string bytes = RandomBytes(size, seed);
  const auto* begin = reinterpret_cast<const std::byte*>(bytes.data());
  return std::vector<std::byte>(begin, begin + bytes.size());
}

BlockData BlockDataOf(const std::vector<std::byte>& bytes) {
  BlockData data;
  data.Append(MakeChunk(bytes));
  return data;
}

std::vector<std::byte> Concat(const std::vector<ChunkPtr>& chunks) {
  BlockData data;
  for (const ChunkPtr& chunk : chunks) data.Append(chunk);
  return data.Flatten();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string AsString(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace bm::testing
