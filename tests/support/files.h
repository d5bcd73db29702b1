#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/chunk.h"

namespace bm::testing {

// `size` pseudo-random bytes, reproducible from `seed`.
std::string RandomBytes(size_t size, uint64_t seed);
// The same bytes as RandomBytes, as a byte vector.
std::vector<std::byte> RandomByteVector(size_t size, uint64_t seed);
// A block's bytes as text, and text as a block's bytes (a view of `s`).
std::string AsString(const std::vector<std::byte>& bytes);
std::span<const std::byte> AsBytes(const std::string& s);
// `bytes` as a block held in memory (one chunk, a copy), and a block's chunks as one run of
// bytes (a copy).
BlockData BlockDataOf(const std::vector<std::byte>& bytes);
std::vector<std::byte> Concat(const std::vector<ChunkPtr>& chunks);

void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

}  // namespace bm::testing
