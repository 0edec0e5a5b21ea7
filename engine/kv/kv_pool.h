// Tensor storage of the paged KV cache: for every layer one pre-allocated K and one V tensor
// of num_blocks * block_size slots, [slots, kv_heads, head_dim], on the serving device. Which
// slot belongs to which token is decided by BlockTable / BlockAllocator (plain C++).
//
// Thread-safety: not thread-safe; used by the engine loop thread.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_allocator.h"

namespace gpeserve::kv {

struct KvShape {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

class KvPool {
 public:
  // Allocates the pool. ResourceExhausted if the allocation fails.
  static absl::StatusOr<KvPool> Create(const KvCacheConfig& config, const KvShape& shape,
                                       torch::ScalarType dtype, torch::Device device);
  // Bytes of K and V over all layers that one block of `block_size` tokens holds.
  static int64_t BlockBytes(int block_size, const KvShape& shape, torch::ScalarType dtype);

  // Stores k, v ([n, kv_heads, head_dim]) of one layer at `slots` ([n] int64, on device).
  void Write(int64_t layer, const torch::Tensor& slots, const torch::Tensor& k,
             const torch::Tensor& v);
  // K and V of one layer at `slots`: [n, kv_heads, head_dim] each.
  torch::Tensor GatherK(int64_t layer, const torch::Tensor& slots) const;
  torch::Tensor GatherV(int64_t layer, const torch::Tensor& slots) const;

  // One layer's whole K or V tensor, [slots, kv_heads, head_dim] (for kernels that read the
  // slots in place).
  const torch::Tensor& keys(int64_t layer) const { return k_[layer]; }
  const torch::Tensor& values(int64_t layer) const { return v_[layer]; }

  torch::Device device() const { return device_; }
  int64_t bytes() const;

 private:
  KvPool(std::vector<torch::Tensor> k, std::vector<torch::Tensor> v, torch::Device device)
      : k_(std::move(k)), v_(std::move(v)), device_(device) {}
  std::vector<torch::Tensor> k_, v_;  // per layer: [slots, kv_heads, head_dim]
  torch::Device device_;
};

}  // namespace gpeserve::kv
