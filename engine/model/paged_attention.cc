#include "engine/model/paged_attention.h"

#include <algorithm>

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
    segments_.push_back({s.begin, s.length, context,
                         torch::tensor(keys, on_device).to(pool.device()),
                         allowed.to(pool.device())});
  }
  new_slots_ = torch::tensor(all_new, on_device).to(pool.device());
}

const std::vector<PagedAttention::Prepared>& PagedAttention::ForWindow(int64_t window) {
  if (window <= 0) return segments_;
  auto [it, inserted] = windowed_.try_emplace(window);
  if (!inserted) return it->second;
  for (const Prepared& s : segments_) {
    // Every row sees itself, so a context key with W - 1 context keys after it has more than
    // W visible keys at or after it in every row: out of every row's window.
    const int64_t keep = std::min(s.context, window - 1), drop = s.context - keep;
    it->second.push_back({s.begin, s.length, keep, s.key_slots.narrow(0, drop, keep + s.length),
                          WindowMask(s.allowed.narrow(1, drop, keep + s.length), window)});
  }
  return it->second;
}

torch::Tensor PagedAttention::Attend(const LayerAttention& spec, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t layer = spec.layer;
  pool_.Write(layer, new_slots_, k, v);
  torch::Tensor out = torch::empty_like(q);
  for (const Prepared& s : ForWindow(spec.window)) {
    const torch::Tensor keys = pool_.GatherK(layer, s.key_slots).to(q.scalar_type());
    const torch::Tensor values = pool_.GatherV(layer, s.key_slots).to(q.scalar_type());
    out.slice(0, s.begin, s.begin + s.length)
        .copy_(ScaledDotProductAttention(q.slice(0, s.begin, s.begin + s.length), keys, values,
                                         s.allowed, spec));
  }
  return out;
}

}  // namespace gpeserve::model
