// Block bookkeeping of the paged KV cache: a fixed number of blocks, each holding the K/V of
// `block_size` tokens in every layer; reference counts (a block may be shared by sessions with
// the same prompt prefix); a free list; and an index of full prefix blocks by content. Only
// metadata lives here; the tensors are in KvPool.
//
// Thread-safety: not thread-safe; owned and used by the engine loop thread alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace gpeserve::kv {

struct KvCacheConfig {
  int block_size = 16;  // tokens per block
  int num_blocks = 0;   // blocks in the pool (per layer)
};

// Counters for metrics. `shared` counts blocks referenced by more than one holder.
struct KvStats {
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t shared_blocks = 0;
  int64_t prefix_hits = 0;    // LookupPrefix found a block
  int64_t prefix_misses = 0;  // LookupPrefix found nothing
};

class BlockAllocator {
 public:
  explicit BlockAllocator(const KvCacheConfig& config);

  int block_size() const { return block_size_; }
  int64_t total_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // A free block with reference count 1, or nullopt when none is free.
  std::optional<int32_t> Allocate();
  void AddRef(int32_t block);
  // Drops one reference; at zero the block returns to the free list (and leaves the prefix
  // index). REQUIRES: the block is referenced.
  void Release(int32_t block);
  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }

  // Prefix sharing. A full block is identified by the tokens it holds and by everything before
  // it (`parent_hash`, 0 for the first block): PrefixHash chains them.
  static uint64_t PrefixHash(uint64_t parent_hash, std::span<const int64_t> tokens);
  // The block registered under `hash` holding exactly `tokens`, with one more reference for
  // the caller; nullopt if none.
  std::optional<int32_t> LookupPrefix(uint64_t hash, std::span<const int64_t> tokens);
  // LookupPrefix for a holder that keeps the block (a long-form session between segments), not
  // counted as a query of the cache.
  std::optional<int32_t> RetainPrefix(uint64_t hash, std::span<const int64_t> tokens);
  // Makes a full, never-again-written block findable by LookupPrefix.
  void RegisterPrefix(uint64_t hash, std::span<const int64_t> tokens, int32_t block);

  KvStats stats() const;

 private:
  struct PrefixEntry {
    int32_t block;
    std::vector<int64_t> tokens;  // to rule out hash collisions
  };
  int block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // stack of free block ids
  absl::flat_hash_map<uint64_t, PrefixEntry> prefix_;
  absl::flat_hash_map<int32_t, uint64_t> prefix_of_block_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace gpeserve::kv
