#include "engine/kv/block_allocator.h"

#include <algorithm>
#include <map>
#include <optional>
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

TEST(BlockAllocatorTest, PrefixBlocksAreFoundByContentUntilEvicted) {
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
  EXPECT_EQ(a.cached_blocks(), 1);
  // Freed, it stays findable and is taken back with one reference.
  EXPECT_EQ(a.LookupPrefix(h1, first), b1);
  EXPECT_EQ(a.ref_count(b1), 1);
  EXPECT_EQ(a.free_blocks(), 3);
  EXPECT_EQ(a.cached_blocks(), 0);
  a.Release(b1);
  // Blocks needed: the plain free ones go first, then the cached one is evicted.
  for (int i = 0; i < 3; ++i) EXPECT_NE(*a.Allocate(), b1);
  EXPECT_EQ(a.cached_blocks(), 1);
  EXPECT_EQ(*a.Allocate(), b1);
  EXPECT_EQ(a.cached_blocks(), 0);
  EXPECT_FALSE(a.LookupPrefix(h1, first).has_value());  // evicted blocks leave the index
}

TEST(BlockAllocatorTest, WithoutTheCacheFreedPrefixBlocksLeaveTheIndex) {
  BlockAllocator a({.block_size = 2, .num_blocks = 2, .cache_freed_prefixes = false});
  const std::vector<int64_t> tokens = {1, 2};
  const uint64_t h = BlockAllocator::PrefixHash(0, tokens);
  const int32_t b = *a.Allocate();
  a.RegisterPrefix(h, tokens, b);
  a.Release(b);
  EXPECT_EQ(a.cached_blocks(), 0);
  EXPECT_FALSE(a.LookupPrefix(h, tokens).has_value());
}

TEST(BlockAllocatorTest, FlushCacheEvictsEveryCachedBlock) {
  BlockAllocator a({.block_size = 2, .num_blocks = 3});
  const std::vector<int64_t> tokens = {5, 6};
  const uint64_t h = BlockAllocator::PrefixHash(0, tokens);
  const int32_t b = *a.Allocate();
  a.RegisterPrefix(h, tokens, b);
  a.Release(b);
  a.FlushCache();
  EXPECT_EQ(a.cached_blocks(), 0);
  EXPECT_EQ(a.free_blocks(), 3);
  EXPECT_FALSE(a.LookupPrefix(h, tokens).has_value());
}

// Random allocations, references, registrations and lookups against a reference model of the
// cache: a held block is never handed out, a lookup finds exactly the registered blocks not yet
// evicted, eviction takes the least recently freed cached block and only when no plain free
// block is left, and the free and cached counts match.
TEST(BlockAllocatorTest, RandomOperationsWithTheCacheMatchAReference) {
  constexpr int kBlocks = 12;
  std::mt19937 rng(5);
  BlockAllocator a({.block_size = 1, .num_blocks = kBlocks});
  std::map<int32_t, int> refs;            // held blocks
  std::map<int32_t, int64_t> registered;  // block -> its token (hash of {token})
  std::vector<int32_t> lru;               // cached blocks, least recently freed first
  int64_t next_token = 0;
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 5;
    if (op == 0) {
      const int64_t plain_free = kBlocks - static_cast<int64_t>(refs.size() + lru.size());
      auto b = a.Allocate();
      ASSERT_EQ(b.has_value(), refs.size() < static_cast<size_t>(kBlocks));
      if (!b) continue;
      ASSERT_FALSE(refs.contains(*b)) << "a held block handed out";
      if (plain_free == 0) {
        ASSERT_FALSE(lru.empty());
        ASSERT_EQ(*b, lru.front()) << "not the least recently freed cached block";
        lru.erase(lru.begin());
        registered.erase(*b);
      } else {
        ASSERT_EQ(std::count(lru.begin(), lru.end(), *b), 0) << "evicted with plain free blocks";
      }
      refs[*b] = 1;
    } else if (op == 1 && !refs.empty()) {
      // Register a held, unregistered block under a new token.
      auto it = std::next(refs.begin(), rng() % refs.size());
      if (registered.contains(it->first)) continue;
      const std::vector<int64_t> tokens = {next_token};
      a.RegisterPrefix(BlockAllocator::PrefixHash(0, tokens), tokens, it->first);
      registered[it->first] = next_token++;
    } else if (op == 2 && next_token > 0) {
      // Look up a token registered at some point (evicted ones must miss).
      const std::vector<int64_t> tokens = {static_cast<int64_t>(rng() % next_token)};
      const auto found = a.LookupPrefix(BlockAllocator::PrefixHash(0, tokens), tokens);
      std::optional<int32_t> expected;
      for (const auto& [block, token] : registered) {
        if (token == tokens[0]) expected = block;
      }
      ASSERT_EQ(found, expected);
      if (found) {
        if (refs[*found]++ == 0) lru.erase(std::find(lru.begin(), lru.end(), *found));
      }
    } else if (op >= 3 && !refs.empty()) {
      auto it = std::next(refs.begin(), rng() % refs.size());
      a.Release(it->first);
      if (--it->second == 0) {
        if (registered.contains(it->first)) lru.push_back(it->first);
        refs.erase(it);
      }
    }
    ASSERT_EQ(a.free_blocks(), kBlocks - static_cast<int64_t>(refs.size()));
    ASSERT_EQ(a.cached_blocks(), static_cast<int64_t>(lru.size()));
    for (const auto& [block, count] : refs) ASSERT_EQ(a.ref_count(block), count);
  }
}

}  // namespace
}  // namespace gpeserve::kv
