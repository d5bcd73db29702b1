#include "common/core/allocator.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace bm {

void TuneAllocatorForBlockBuffers() {
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit; buffers below it come from
  // the heap. Setting it also turns off glibc's dynamic threshold adjustment.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Return memory to the OS only when more than this much is free at the top of the heap.
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // Grow the heap in large steps, so a burst of frames does not extend it buffer by buffer.
  mallopt(M_TOP_PAD, 64 << 20);
}

void AdviseHugePages(std::byte* data, size_t size) {
  constexpr uintptr_t kHugePage = 2 << 20;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(kHugePage - 1);
  if (end <= start) return;
  // Errors (no THP in this kernel, a range not anonymous memory) leave the pages as they were.
  (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
}

void RestartWithHugePageHeaps(char** argv) {
  constexpr const char* kSetting = "glibc.malloc.hugetlb";
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string current = tunables ? tunables : "";
  if (current.find(kSetting) != std::string::npos) return;
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream mode;
  mode << mode_file.rdbuf();
  if (mode.str().find("[madvise]") == std::string::npos) return;
  const std::string wanted = (current.empty() ? "" : current + ":") + kSetting + "=1";
  if (setenv("GLIBC_TUNABLES", wanted.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Not restarted (no /proc, say): go on as we are, with the setting undone.
  if (tunables) {
    setenv("GLIBC_TUNABLES", tunables, 1);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace bm
