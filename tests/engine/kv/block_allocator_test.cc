#include "engine/kv/block_allocator.h"

#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpeserve::kv {
namespace {

TEST(BlockAllocatorTest, AllocatesUntilEmptyAndFreesOnLastRelease) {
  BlockAllocator a({.block_size = 4, .num_blocks = 3});
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(*a.Allocate());
  EXPECT_FALSE(a.Allocate().has_value());
  EXPECT_EQ(a.free_blocks(), 0);
  a.AddRef(got[1]);
  a.Release(got[1]);
  EXPECT_EQ(a.free_blocks(), 0);  // still referenced once
  a.Release(got[1]);
  EXPECT_EQ(a.free_blocks(), 1);
  EXPECT_EQ(*a.Allocate(), got[1]);
}

TEST(BlockAllocatorTest, RandomOperationsMatchReferenceCounts) {
  std::mt19937 rng(9);
  BlockAllocator a({.block_size = 16, .num_blocks = 20});
  std::map<int32_t, int> refs;  // reference model
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 3;
    if (op == 0) {
      auto b = a.Allocate();
      ASSERT_EQ(b.has_value(), refs.size() < 20u);
      if (b) {
        ASSERT_FALSE(refs.contains(*b));
        refs[*b] = 1;
      }
    } else if (!refs.empty()) {
      auto it = std::next(refs.begin(), rng() % refs.size());
      if (op == 1) {
        a.AddRef(it->first);
        ++it->second;
      } else {
        a.Release(it->first);
        if (--it->second == 0) refs.erase(it);
      }
    }
    ASSERT_EQ(a.free_blocks(), 20 - static_cast<int64_t>(refs.size()));
    for (const auto& [block, count] : refs) ASSERT_EQ(a.ref_count(block), count);
  }
}

TEST(BlockAllocatorTest, PrefixBlocksAreFoundByContentUntilFreed) {
  BlockAllocator a({.block_size = 2, .num_blocks = 4});
  const std::vector<int64_t> first = {1, 2}, second = {3, 4};
  const uint64_t h1 = BlockAllocator::PrefixHash(0, first);
  const uint64_t h2 = BlockAllocator::PrefixHash(h1, second);
  EXPECT_NE(h1, BlockAllocator::PrefixHash(0, second));
  EXPECT_NE(h2, BlockAllocator::PrefixHash(0, second));  // the parent is part of the hash
  EXPECT_FALSE(a.LookupPrefix(h1, first).has_value());
  const int32_t b1 = *a.Allocate();
  a.RegisterPrefix(h1, first, b1);
  EXPECT_EQ(a.LookupPrefix(h1, first), b1);
  EXPECT_EQ(a.ref_count(b1), 2);
  EXPECT_FALSE(a.LookupPrefix(h1, second).has_value());  // same hash, other tokens: no match
  // RetainPrefix: the same block and one more reference, not counted as a cache query.
  const KvStats before = a.stats();
  const int32_t refs = a.ref_count(b1);
  EXPECT_EQ(a.RetainPrefix(h1, first), b1);
  EXPECT_EQ(a.ref_count(b1), refs + 1);
  EXPECT_FALSE(a.RetainPrefix(h1, second).has_value());
  EXPECT_EQ(a.stats().prefix_hits, before.prefix_hits);
  EXPECT_EQ(a.stats().prefix_misses, before.prefix_misses);
  a.Release(b1);
  const KvStats s = a.stats();
  EXPECT_EQ(s.prefix_hits, 1);
  EXPECT_EQ(s.prefix_misses, 2);
  EXPECT_EQ(s.shared_blocks, 1);
  a.Release(b1);
  a.Release(b1);
  EXPECT_EQ(a.free_blocks(), 4);
  EXPECT_FALSE(a.LookupPrefix(h1, first).has_value());  // freed blocks leave the index
}

}  // namespace
}  // namespace gpeserve::kv
