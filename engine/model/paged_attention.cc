#include "engine/model/paged_attention.h"

namespace gpeserve::model {

PagedAttention::PagedAttention(kv::KvPool& pool, const std::vector<AttentionSegment>& segments)
    : pool_(pool) {
  const auto on_device = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<int64_t> all_new;
  for (const AttentionSegment& s : segments) {
    all_new.insert(all_new.end(), s.new_slots.begin(), s.new_slots.end());
    std::vector<int64_t> keys = s.context_slots;
    keys.insert(keys.end(), s.new_slots.begin(), s.new_slots.end());
    const int64_t context = static_cast<int64_t>(s.context_slots.size());
    torch::Tensor own = DenseAttention::CausalMask(s.length);
    if (s.noncausal > 0) own.slice(0, 0, s.noncausal).slice(1, 0, s.noncausal).fill_(true);
    torch::Tensor allowed = torch::cat({torch::ones({s.length, context}, torch::kBool), own}, 1);
    segments_.push_back({s.begin, s.length, torch::tensor(keys, on_device).to(pool.device()),
                         allowed.to(pool.device())});
  }
  new_slots_ = torch::tensor(all_new, on_device).to(pool.device());
}

torch::Tensor PagedAttention::Attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) {
  pool_.Write(layer, new_slots_, k, v);
  torch::Tensor out = torch::empty_like(q);
  for (const Prepared& s : segments_) {
    const torch::Tensor keys = pool_.GatherK(layer, s.key_slots).to(q.scalar_type());
    const torch::Tensor values = pool_.GatherV(layer, s.key_slots).to(q.scalar_type());
    out.slice(0, s.begin, s.begin + s.length)
        .copy_(ScaledDotProductAttention(q.slice(0, s.begin, s.begin + s.length), keys, values,
                                         s.allowed));
  }
  return out;
}

}  // namespace gpeserve::model
