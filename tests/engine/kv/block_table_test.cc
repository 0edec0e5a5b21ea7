#include "engine/kv/block_table.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::kv {
namespace {

TEST(BlockTableTest, SlotsFollowBlocks) {
  BlockAllocator a({.block_size = 4, .num_blocks = 8});
  BlockTable t;
  ASSERT_TRUE(t.Append(6, a).ok());
  ASSERT_EQ(t.blocks().size(), 2u);
  EXPECT_EQ(t.Slot(0, 4), t.blocks()[0] * 4);
  EXPECT_EQ(t.Slot(5, 4), t.blocks()[1] * 4 + 1);
  EXPECT_EQ(t.Slots(3, 6, 4), (std::vector<int64_t>{t.blocks()[0] * 4 + 3, t.blocks()[1] * 4,
                                                    t.blocks()[1] * 4 + 1}));
  EXPECT_EQ(t.BlocksNeeded(2, 4), 0);
  EXPECT_EQ(t.BlocksNeeded(3, 4), 1);
}

TEST(BlockTableTest, TruncateReleasesEmptiedBlocks) {
  BlockAllocator a({.block_size = 4, .num_blocks = 8});
  BlockTable t;
  ASSERT_TRUE(t.Append(9, a).ok());
  EXPECT_EQ(a.free_blocks(), 5);
  t.Truncate(1, a);  // 8 tokens: still 2 full blocks
  EXPECT_EQ(a.free_blocks(), 6);
  t.Truncate(1, a);
  EXPECT_EQ(a.free_blocks(), 6);
  t.Release(a);
  EXPECT_EQ(a.free_blocks(), 8);
  EXPECT_EQ(t.num_tokens(), 0);
}

TEST(BlockTableTest, AppendIsAllOrNothing) {
  BlockAllocator a({.block_size = 4, .num_blocks = 2});
  BlockTable t;
  ASSERT_TRUE(t.Append(3, a).ok());
  const absl::Status s = t.Append(8, a);  // needs 2 more blocks, 1 free
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.num_tokens(), 3);
  EXPECT_EQ(a.free_blocks(), 1);
}

TEST(BlockTableTest, SharedPrefixBlocksSurviveOneHolder) {
  BlockAllocator a({.block_size = 2, .num_blocks = 6});
  BlockTable owner, sharer;
  ASSERT_TRUE(owner.Append(2, a).ok());
  const int32_t prefix = owner.blocks()[0];
  a.AddRef(prefix);
  sharer.AppendSharedBlock(prefix, 2);
  ASSERT_TRUE(sharer.Append(1, a).ok());
  EXPECT_EQ(sharer.Slot(0, 2), owner.Slot(0, 2));
  owner.Release(a);
  EXPECT_EQ(a.ref_count(prefix), 1);
  sharer.Release(a);
  EXPECT_EQ(a.free_blocks(), 6);
}

TEST(BlockTableTest, RandomTablesNeverShareSlotsAndReturnEveryBlock) {
  std::mt19937 rng(4);
  BlockAllocator a({.block_size = 3, .num_blocks = 40});
  std::vector<BlockTable> tables(5);
  std::vector<int64_t> sizes(5, 0);
  for (int step = 0; step < 5000; ++step) {
    const size_t i = rng() % tables.size();
    if (rng() % 2 == 0) {
      const int64_t n = 1 + rng() % 5;
      if (tables[i].Append(n, a).ok()) sizes[i] += n;
    } else if (sizes[i] > 0) {
      const int64_t n = 1 + rng() % sizes[i];
      tables[i].Truncate(n, a);
      sizes[i] -= n;
    }
    std::set<int64_t> slots;
    int64_t used_blocks = 0;
    for (size_t j = 0; j < tables.size(); ++j) {
      ASSERT_EQ(tables[j].num_tokens(), sizes[j]);
      ASSERT_EQ(static_cast<int64_t>(tables[j].blocks().size()), (sizes[j] + 2) / 3);
      used_blocks += static_cast<int64_t>(tables[j].blocks().size());
      for (int64_t t = 0; t < sizes[j]; ++t) ASSERT_TRUE(slots.insert(tables[j].Slot(t, 3)).second);
    }
    ASSERT_EQ(a.free_blocks(), 40 - used_blocks);
  }
  for (auto& t : tables) t.Release(a);
  EXPECT_EQ(a.free_blocks(), 40);
}

}  // namespace
}  // namespace gpeserve::kv
