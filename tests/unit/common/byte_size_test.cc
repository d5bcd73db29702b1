#include "common/core/byte_size.h"

#include <gtest/gtest.h>

namespace bm {
namespace {

TEST(ByteSizeTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(ParseByteSize("0").value(), 0u);
  EXPECT_EQ(ParseByteSize("123").value(), 123u);
  EXPECT_EQ(ParseByteSize("512MiB").value(), 512 * kMiB);
  EXPECT_EQ(ParseByteSize("4GiB").value(), 4 * kGiB);
  EXPECT_EQ(ParseByteSize("4 gib").value(), 4 * kGiB);
  EXPECT_EQ(ParseByteSize("64k").value(), 64 * kKiB);
  EXPECT_EQ(ParseByteSize("1.5G").value(), 3 * kGiB / 2);
  EXPECT_EQ(ParseByteSize("10MB").value(), 10'000'000u);
}

TEST(ByteSizeTest, RejectsGarbage) {
  for (const char* text : {"", "MiB", "12XB", "-5MiB", "1..2G", "1e3", "99999999999TiB"}) {
    EXPECT_FALSE(ParseByteSize(text).ok()) << text;
  }
}

TEST(ByteSizeTest, FormatsForHumans) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * kMiB / 2), "1.5 MiB");
}

}  // namespace
}  // namespace bm
