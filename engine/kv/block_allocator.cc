#include "engine/kv/block_allocator.h"

#include <cassert>

namespace gpeserve::kv {

BlockAllocator::BlockAllocator(const KvCacheConfig& config)
    : block_size_(config.block_size),
      cache_freed_prefixes_(config.cache_freed_prefixes),
      ref_counts_(config.num_blocks, 0) {
  free_.reserve(config.num_blocks);
  // Hand out low ids first (pop from the back).
  for (int32_t b = config.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::Allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!cached_.empty()) {
    block = cached_.front();
    cached_.pop_front();
    cached_at_.erase(block);
    Unregister(block);
  } else {
    return std::nullopt;
  }
  ref_counts_[block] = 1;
  return block;
}

void BlockAllocator::AddRef(int32_t block) {
  assert(ref_counts_[block] > 0);
  ++ref_counts_[block];
}

void BlockAllocator::Release(int32_t block) {
  assert(ref_counts_[block] > 0);
  if (--ref_counts_[block] > 0) return;
  if (cache_freed_prefixes_ && prefix_of_block_.contains(block)) {
    cached_at_[block] = cached_.insert(cached_.end(), block);
    return;
  }
  Unregister(block);
  free_.push_back(block);
}

void BlockAllocator::FlushCache() {
  for (int32_t block : cached_) {
    Unregister(block);
    free_.push_back(block);
  }
  cached_.clear();
  cached_at_.clear();
}

void BlockAllocator::Take(int32_t block) {
  if (ref_counts_[block] > 0) {
    ++ref_counts_[block];
    return;
  }
  const auto it = cached_at_.find(block);
  assert(it != cached_at_.end());
  cached_.erase(it->second);
  cached_at_.erase(it);
  ref_counts_[block] = 1;
}

void BlockAllocator::Unregister(int32_t block) {
  if (auto it = prefix_of_block_.find(block); it != prefix_of_block_.end()) {
    prefix_.erase(it->second);
    prefix_of_block_.erase(it);
  }
}

uint64_t BlockAllocator::PrefixHash(uint64_t parent_hash, std::span<const int64_t> tokens) {
  // splitmix64-style mixing of the parent hash and each token.
  auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(parent_hash ^ 0x6A09E667F3BCC908ull);
  for (int64_t t : tokens) h = mix(h ^ static_cast<uint64_t>(t));
  return h;
}

std::optional<int32_t> BlockAllocator::LookupPrefix(uint64_t hash,
                                                    std::span<const int64_t> tokens) {
  const auto it = prefix_.find(hash);
  if (it == prefix_.end() || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                         it->second.tokens.end())) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  Take(it->second.block);
  return it->second.block;
}

std::optional<int32_t> BlockAllocator::RetainPrefix(uint64_t hash,
                                                    std::span<const int64_t> tokens) {
  const auto it = prefix_.find(hash);
  if (it == prefix_.end() || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                         it->second.tokens.end())) {
    return std::nullopt;
  }
  Take(it->second.block);
  return it->second.block;
}

void BlockAllocator::RegisterPrefix(uint64_t hash, std::span<const int64_t> tokens, int32_t block) {
  if (prefix_.contains(hash) || prefix_of_block_.contains(block)) return;
  prefix_[hash] = PrefixEntry{block, std::vector<int64_t>(tokens.begin(), tokens.end())};
  prefix_of_block_[block] = hash;
}

KvStats BlockAllocator::stats() const {
  KvStats s;
  s.total_blocks = total_blocks();
  s.free_blocks = free_blocks();
  s.cached_blocks = cached_blocks();
  for (int32_t r : ref_counts_) s.shared_blocks += r > 1;
  s.prefix_hits = hits_;
  s.prefix_misses = misses_;
  s.block_size = block_size_;
  return s;
}

}  // namespace gpeserve::kv
