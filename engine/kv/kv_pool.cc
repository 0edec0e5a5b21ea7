#include "engine/kv/kv_pool.h"

#include "absl/strings/str_cat.h"

namespace gpeserve::kv {

absl::StatusOr<KvPool> KvPool::Create(const KvCacheConfig& config, const KvShape& shape,
                                      torch::ScalarType dtype, torch::Device device) {
  const int64_t slots = static_cast<int64_t>(config.num_blocks) * config.block_size;
  std::vector<torch::Tensor> k, v;
  try {
    const auto options = torch::TensorOptions().dtype(dtype).device(device);
    for (int64_t l = 0; l < shape.layers; ++l) {
      k.push_back(torch::zeros({slots, shape.kv_heads, shape.head_dim}, options));
      v.push_back(torch::zeros({slots, shape.kv_heads, shape.head_dim}, options));
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the KV cache (", config.num_blocks, " blocks of ",
                     config.block_size, " tokens): ", e.what_without_backtrace()));
  }
  return KvPool(std::move(k), std::move(v), device);
}

int64_t KvPool::BlockBytes(int block_size, const KvShape& shape, torch::ScalarType dtype) {
  return 2 * shape.layers * block_size * shape.kv_heads * shape.head_dim *
         static_cast<int64_t>(torch::elementSize(dtype));
}

void KvPool::Write(int64_t layer, const torch::Tensor& slots, const torch::Tensor& k,
                   const torch::Tensor& v) {
  k_[layer].index_copy_(0, slots, k.to(k_[layer].scalar_type()));
  v_[layer].index_copy_(0, slots, v.to(v_[layer].scalar_type()));
}

torch::Tensor KvPool::GatherK(int64_t layer, const torch::Tensor& slots) const {
  return k_[layer].index_select(0, slots);
}

torch::Tensor KvPool::GatherV(int64_t layer, const torch::Tensor& slots) const {
  return v_[layer].index_select(0, slots);
}

int64_t KvPool::bytes() const {
  int64_t total = 0;
  for (const auto& t : k_) total += t.numel() * t.element_size();
  for (const auto& t : v_) total += t.numel() * t.element_size();
  return total;
}

}  // namespace gpeserve::kv
