#pragma once

#include <cstdint>
#include <string>

namespace bm::testing {

// `size` pseudo-random bytes, reproducible from `seed`.
std::string RandomBytes(size_t size, uint64_t seed);
void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

}  // namespace bm::testing
