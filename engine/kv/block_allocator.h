// Block bookkeeping of the paged KV cache: a fixed number of blocks, each holding the K/V of
// `block_size` tokens in every layer; reference counts (a block may be shared by sessions with
// the same prompt prefix); a free list; and an index of full prefix blocks by content. Only
// metadata lives here; the tensors are in KvPool.
//
// The prefix cache outlives sessions: a registered prefix block whose last reference goes keeps
// its K/V and its place in the index, free but cached, until a block is needed and no plain free
// one is left; then the least recently freed cached block is evicted (leaves the index) and
// handed out. A lookup that finds a cached block takes it back. Free blocks count both kinds.
//
// Thread-safety: not thread-safe; owned and used by the engine loop thread alone.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace gpeserve::kv {

struct KvCacheConfig {
  int block_size = 16;  // tokens per block
  int num_blocks = 0;   // blocks in the pool (per layer)
  // Keep freed prefix blocks findable until evicted; false: a prefix block leaves the index
  // with its last reference (shared only while held).
  bool cache_freed_prefixes = true;
};

// Counters for metrics. `shared` counts blocks referenced by more than one holder.
struct KvStats {
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;    // plain free and cached
  int64_t cached_blocks = 0;  // free blocks that keep a prefix, findable until evicted
  int64_t shared_blocks = 0;
  int64_t prefix_hits = 0;    // LookupPrefix found a block
  int64_t prefix_misses = 0;  // LookupPrefix found nothing
  int block_size = 0;         // tokens per block (the hits and misses in tokens)
};

class BlockAllocator {
 public:
  explicit BlockAllocator(const KvCacheConfig& config);

  int block_size() const { return block_size_; }
  int64_t total_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + cached_.size()); }
  int64_t cached_blocks() const { return static_cast<int64_t>(cached_.size()); }

  // A free block with reference count 1 (a plain free one first, else the least recently freed
  // cached one, evicted), or nullopt when none is free.
  std::optional<int32_t> Allocate();
  void AddRef(int32_t block);
  // Drops one reference; at zero the block becomes free: cached if it is a registered prefix
  // block (and cache_freed_prefixes), else plain free. REQUIRES: the block is referenced.
  void Release(int32_t block);
  // Evicts every cached block (they become plain free).
  void FlushCache();
  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }

  // Prefix sharing. A full block is identified by the tokens it holds and by everything before
  // it (`parent_hash`, 0 for the first block): PrefixHash chains them.
  static uint64_t PrefixHash(uint64_t parent_hash, std::span<const int64_t> tokens);
  // The block registered under `hash` holding exactly `tokens`, with one more reference for
  // the caller (a cached block is taken back with one); nullopt if none.
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
  // One more reference to `block`, taking it out of the cache when it was cached.
  void Take(int32_t block);
  // Removes `block` from the prefix index.
  void Unregister(int32_t block);

  int block_size_;
  bool cache_freed_prefixes_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // stack of plain free block ids
  // Cached free blocks, least recently freed first, and where each is in the list.
  std::list<int32_t> cached_;
  absl::flat_hash_map<int32_t, std::list<int32_t>::iterator> cached_at_;
  absl::flat_hash_map<uint64_t, PrefixEntry> prefix_;
  absl::flat_hash_map<int32_t, uint64_t> prefix_of_block_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace gpeserve::kv
