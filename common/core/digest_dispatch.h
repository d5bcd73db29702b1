#pragma once

// Internal to common/core/digest.cc: the XXH3 entry points compiled for AVX2 (digest_avx2.cc).

#include <cstddef>
#include <cstdint>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace bm::digest_internal {

uint64_t OneShotAvx2(const void* data, size_t size);
void UpdateAvx2(XXH3_state_t* state, const void* data, size_t size);

}  // namespace bm::digest_internal
