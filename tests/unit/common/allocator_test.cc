#include "common/core/allocator.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/support/files.h"

namespace bm {
namespace {

// The "THPeligible:" line of the /proc/self/smaps entry whose range holds `address`; -1 if none.
int ThpEligible(uintptr_t address) {
  std::istringstream smaps(bm::testing::ReadFile("/proc/self/smaps"));
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> start >> dash >> end && dash == '-') {
      inside = start <= address && address < end;
      continue;
    }
    if (inside && line.starts_with("THPeligible:")) return std::stoi(line.substr(12));
  }
  return -1;
}

TEST(AdviseHugePagesTest, MakesTheAlignedExtentsOfABufferEligibleForHugePages) {
  const std::string mode_file = "/sys/kernel/mm/transparent_hugepage/enabled";
  const std::string mode =
      std::filesystem::exists(mode_file) ? bm::testing::ReadFile(mode_file) : "absent";
  if (mode.find("[madvise]") == std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are not in madvise mode here (" << mode << ")";
  }
  constexpr size_t kSize = 16 << 20;
  void* mapped = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(mapped);
  const uintptr_t inside =
      (reinterpret_cast<uintptr_t>(bytes) + (4 << 20)) & ~uintptr_t{(2 << 20) - 1};
  EXPECT_EQ(ThpEligible(inside), 0) << "not advised yet";
  AdviseHugePages(bytes + 100, kSize - 200);  // not aligned itself: only whole 2 MiB extents
  EXPECT_EQ(ThpEligible(inside), 1);
  munmap(mapped, kSize);
}

TEST(AdviseHugePagesTest, ARangeHoldingNoAlignedExtentIsLeftAlone) {
  constexpr size_t kSize = 4 << 20;
  void* mapped = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* bytes = static_cast<std::byte*>(mapped);
  // One MiB from a 2 MiB boundary plus a bit: no whole aligned 2 MiB inside, nothing advised.
  const uintptr_t boundary =
      (reinterpret_cast<uintptr_t>(bytes) + (2 << 20) - 1) & ~uintptr_t{(2 << 20) - 1};
  std::byte* start = reinterpret_cast<std::byte*>(boundary) - (1 << 20);
  if (start < bytes) start += 2 << 20;
  const int before = ThpEligible(reinterpret_cast<uintptr_t>(start));
  AdviseHugePages(start, (2 << 20) - 4096);
  EXPECT_EQ(ThpEligible(reinterpret_cast<uintptr_t>(start)), before);
  munmap(mapped, kSize);
}

}  // namespace
}  // namespace bm
