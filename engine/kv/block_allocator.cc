#include "engine/kv/block_allocator.h"

#include <cassert>

namespace gpeserve::kv {

BlockAllocator::BlockAllocator(const KvCacheConfig& config)
    : block_size_(config.block_size), ref_counts_(config.num_blocks, 0) {
  free_.reserve(config.num_blocks);
  // Hand out low ids first (pop from the back).
  for (int32_t b = config.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t block = free_.back();
  free_.pop_back();
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
  if (auto it = prefix_of_block_.find(block); it != prefix_of_block_.end()) {
    prefix_.erase(it->second);
    prefix_of_block_.erase(it);
  }
  free_.push_back(block);
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
  AddRef(it->second.block);
  return it->second.block;
}

std::optional<int32_t> BlockAllocator::RetainPrefix(uint64_t hash,
                                                    std::span<const int64_t> tokens) {
  const auto it = prefix_.find(hash);
  if (it == prefix_.end() || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                         it->second.tokens.end())) {
    return std::nullopt;
  }
  AddRef(it->second.block);
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
  for (int32_t r : ref_counts_) s.shared_blocks += r > 1;
  s.prefix_hits = hits_;
  s.prefix_misses = misses_;
  return s;
}

}  // namespace gpeserve::kv
