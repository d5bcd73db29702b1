#pragma once

// How many times slower this test binary and the servers it starts run under the sanitizer they
// were built with. A test that bounds a wait to prove something answers promptly (a server
// answering a probe within a second while slow clients hold its threads) multiplies its bound
// by it, so a sanitizer build checks the same property instead of the sanitizer's overhead.
//
// The factors are coarse: ThreadSanitizer slows such code 5-15x, AddressSanitizer about 2-3x.

#include "common/core/tsan.h"

namespace bm::testing {

#if defined(BM_TSAN_ENABLED)
inline constexpr int kSanitizerSlowdown = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerSlowdown = 3;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace bm::testing
