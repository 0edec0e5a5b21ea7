// The blocks of one token sequence in the paged KV cache (a session has one for its source
// group and one for its target group): which blocks, in order, and how many tokens they hold.
// Token i lives in slot blocks[i / block_size] * block_size + i % block_size of the pool.
//
// Thread-safety: not thread-safe; used by the engine loop thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/kv/block_allocator.h"
#include "engine/kv/blocks.h"

namespace gpeserve::kv {

class BlockTable {
 public:
  int64_t num_tokens() const { return num_tokens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

  // Pool slot of token i. REQUIRES: i < num_tokens().
  int64_t Slot(int64_t i, int block_size) const {
    return static_cast<int64_t>(blocks_[i / block_size]) * block_size + i % block_size;
  }
  // Slots of tokens [begin, end).
  std::vector<int64_t> Slots(int64_t begin, int64_t end, int block_size) const;

  // Empty slots in the last block.
  int64_t FreeSlots(int block_size) const {
    return static_cast<int64_t>(blocks_.size()) * block_size - num_tokens_;
  }
  // Blocks that Append(n) would allocate.
  int64_t BlocksNeeded(int64_t n, int block_size) const {
    return BlocksFor(n, FreeSlots(block_size), block_size);
  }
  // Grows the sequence by n tokens, allocating blocks as needed. All or nothing: on
  // ResourceExhausted nothing changed.
  absl::Status Append(int64_t n, BlockAllocator& allocator);
  // Appends a full block shared with other holders (a prompt-prefix block; the caller holds a
  // reference for this table). REQUIRES: num_tokens() is a multiple of the block size.
  void AppendSharedBlock(int32_t block, int block_size);
  // Drops the last n tokens, releasing blocks that become empty.
  void Truncate(int64_t n, BlockAllocator& allocator);
  // Drops everything.
  void Release(BlockAllocator& allocator);

 private:
  std::vector<int32_t> blocks_;
  int64_t num_tokens_ = 0;
};

}  // namespace gpeserve::kv
