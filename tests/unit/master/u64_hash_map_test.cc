#include "master/u64_hash_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace bm {
namespace {

std::map<uint64_t, int> Contents(const U64HashMap<int>& map) {
  std::map<uint64_t, int> out;
  map.ForEach([&](uint64_t key, int value) { EXPECT_TRUE(out.emplace(key, value).second); });
  return out;
}

TEST(U64HashMapTest, FindsWhatWasAddedAndNotWhatWasErased) {
  U64HashMap<int> map;
  EXPECT_EQ(map.Find(3), nullptr);
  bool added = false;
  map.FindOrAdd(3, &added) = 30;
  EXPECT_TRUE(added);
  map.FindOrAdd(3, &added);
  EXPECT_FALSE(added);
  ASSERT_NE(map.Find(3), nullptr);
  EXPECT_EQ(*map.Find(3), 30);
  EXPECT_TRUE(map.Erase(3));
  EXPECT_FALSE(map.Erase(3));
  EXPECT_EQ(map.Find(3), nullptr);
  EXPECT_TRUE(map.empty());
}

TEST(U64HashMapTest, TheEmptyMarkerKeyIsAnOrdinaryKey) {
  U64HashMap<int> map;
  bool added = false;
  map.FindOrAdd(UINT64_MAX, &added) = 7;
  map.FindOrAdd(0, &added) = 1;
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(Contents(map), (std::map<uint64_t, int>{{0, 1}, {UINT64_MAX, 7}}));
  EXPECT_TRUE(map.Erase(UINT64_MAX));
  EXPECT_EQ(map.Find(UINT64_MAX), nullptr);
  EXPECT_EQ(map.size(), 1u);
}

// Dense, strided and random keys; adds, erasures (with shrinking) and erase-if scans, against
// std::map.
TEST(U64HashMapTest, MatchesAStdMapUnderRandomChanges) {
  U64HashMap<int> map;
  std::map<uint64_t, int> model;
  std::mt19937_64 rng(7);
  auto pick = [&]() -> uint64_t {
    switch (rng() % 4) {
      case 0:
        return rng() % 3000;  // dense partitions
      case 1:
        return (rng() % 300) * 1024;  // strided
      case 2:
        return UINT64_MAX - rng() % 3;  // the marker and its neighbours
      default:
        return rng() % 100000;
    }
  };
  for (int step = 0; step < 50000; ++step) {
    const uint64_t key = pick();
    const uint32_t action = rng() % 100;
    if (action < 60) {
      bool added = false;
      map.FindOrAdd(key, &added) = step;
      EXPECT_EQ(added, model.count(key) == 0);
      model[key] = step;
    } else if (action < 99) {
      EXPECT_EQ(map.Erase(key), model.erase(key) == 1);
    } else {
      // Erase the odd values, stopping after a few, as BlockIndex::RemoveWorker does.
      size_t erased = 0;
      const size_t limit = rng() % 50;
      map.UpdateAndEraseIf(
          [&](uint64_t, int& value) {
            if (value % 2 == 0) return false;
            value = -2;  // idempotent: a second visit sees an even value
            ++erased;
            return true;
          },
          [&] { return erased < limit; });
      std::map<uint64_t, int> expected = model;
      std::erase_if(expected, [](const auto& entry) { return entry.second % 2 != 0; });
      // Which odd entries went depends on the table's order; check the count and that only
      // odd entries went, then adopt the map's contents.
      std::map<uint64_t, int> got = Contents(map);
      ASSERT_EQ(got.size(), model.size() - erased);
      for (const auto& [k, v] : got) {
        ASSERT_TRUE(model.count(k));
        ASSERT_EQ(model.at(k), v);
      }
      if (erased < limit) {
        ASSERT_EQ(got, expected);  // the scan went through: every odd entry went
      }
      model = got;
    }
    ASSERT_EQ(map.size(), model.size());
    if (step % 5000 == 0) {
      ASSERT_EQ(Contents(map), model);
      for (const auto& [k, v] : model) {
        const int* found = map.Find(k);
        ASSERT_NE(found, nullptr) << k;
        ASSERT_EQ(*found, v);
      }
    }
  }
}

}  // namespace
}  // namespace bm
