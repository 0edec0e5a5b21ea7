// Block arithmetic, the one place it is written: how many blocks a number of tokens takes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace gpeserve::kv {

// New blocks that `tokens` more tokens take when the last block held has `free_slots` empty
// slots (0 for a sequence that ends on a block boundary, or holds nothing).
inline int64_t BlocksFor(int64_t tokens, int64_t free_slots, int block_size) {
  const int64_t beyond = tokens - free_slots;
  return beyond <= 0 ? 0 : (beyond + block_size - 1) / block_size;
}

}  // namespace gpeserve::kv
