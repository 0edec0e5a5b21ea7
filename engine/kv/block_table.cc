#include "engine/kv/block_table.h"

#include <cassert>

#include "absl/strings/str_cat.h"

namespace gpeserve::kv {

std::vector<int64_t> BlockTable::Slots(int64_t begin, int64_t end, int block_size) const {
  std::vector<int64_t> slots;
  slots.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i) slots.push_back(Slot(i, block_size));
  return slots;
}

absl::Status BlockTable::Append(int64_t n, BlockAllocator& allocator) {
  const int64_t needed = BlocksNeeded(n, allocator.block_size());
  if (needed > allocator.free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: ", needed, " blocks needed, ",
                                                     allocator.free_blocks(), " free"));
  }
  for (int64_t i = 0; i < needed; ++i) blocks_.push_back(*allocator.Allocate());
  num_tokens_ += n;
  return absl::OkStatus();
}

void BlockTable::AppendSharedBlock(int32_t block, int block_size) {
  assert(num_tokens_ % block_size == 0);
  blocks_.push_back(block);
  num_tokens_ += block_size;
}

void BlockTable::Truncate(int64_t n, BlockAllocator& allocator) {
  assert(n <= num_tokens_);
  num_tokens_ -= n;
  const int block_size = allocator.block_size();
  const size_t keep = static_cast<size_t>(BlocksFor(num_tokens_, 0, block_size));
  while (blocks_.size() > keep) {
    allocator.Release(blocks_.back());
    blocks_.pop_back();
  }
}

void BlockTable::Release(BlockAllocator& allocator) { Truncate(num_tokens_, allocator); }

}  // namespace gpeserve::kv
