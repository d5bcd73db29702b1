#pragma once

#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

namespace bm::testing {

// `size` pseudo-random bytes, reproducible from `seed`.
std::string RandomBytes(size_t size, uint64_t seed);
// The same bytes as RandomBytes, as a byte vector.
std::vector<std::byte> RandomByteVector(size_t size, uint64_t seed);
void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

}  // namespace bm::testing
