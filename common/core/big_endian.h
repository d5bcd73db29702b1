#pragma once

// Fixed-width big-endian numbers in RocksDB keys (the worker's disk store, the master's
// journal): big-endian so that keys sort in numeric order.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bm {

// Appends the 8 bytes of `value`, most significant first.
inline void PutBigEndian(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

// The number in the first 8 bytes of `in`, which must hold at least 8.
inline uint64_t GetBigEndian(std::string_view in) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

}  // namespace bm
