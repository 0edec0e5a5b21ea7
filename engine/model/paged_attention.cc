#include "engine/model/paged_attention.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "engine/model/linear.h"

namespace gpeserve::model {

bool PagedAttention::InPlaceOnCpu() {
  static const bool in_place = [] {
    const char* v = std::getenv("GPESERVE_CPU_ATTENTION");
    return v == nullptr || std::string_view(v) != "libtorch";
  }();
  return in_place;
}

PagedAttention::PagedAttention(kv::KvPool& pool, const std::vector<AttentionSegment>& segments)
    : pool_(pool) {
  const auto on_device = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<int64_t> all_new;
  for (const AttentionSegment& s : segments) {
    all_new.insert(all_new.end(), s.new_slots.begin(), s.new_slots.end());
  }
  new_slots_ = torch::tensor(all_new, on_device).to(pool.device());
  if (pool.device().is_cpu() && InPlaceOnCpu()) {
    kv_type_ = CpuElementType(pool.keys(0).scalar_type());  // fp32, bf16 or fp16
    // The kernel's runs: plain vectors, no tensors (a step of many sessions would otherwise
    // build several small tensors per session).
    host_keys_.reserve(segments.size());
    for (size_t i = 0; i < segments.size(); ++i) {
      const AttentionSegment& s = segments[i];
      std::vector<int64_t>& keys = host_keys_.emplace_back(s.context_slots);
      keys.insert(keys.end(), s.new_slots.begin(), s.new_slots.end());
      runs_.push_back(
          {keys.data(), static_cast<int64_t>(s.context_slots.size()), s.length, s.noncausal});
      for (int64_t r = 0; r < s.length; ++r) row_run_.push_back({static_cast<int32_t>(i), r});
    }
    return;
  }
  for (const AttentionSegment& s : segments) {
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
  if (!runs_.empty()) return AttendInPlace(spec, q);
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

torch::Tensor PagedAttention::AttendInPlace(const LayerAttention& layer, const torch::Tensor& q) {
  // A CPU model computes in fp32 whatever its weights (Model::Load).
  TORCH_CHECK(q.scalar_type() == torch::kFloat32, "paged attention on the CPU needs fp32 queries");
  const torch::Tensor queries = q.contiguous();
  torch::Tensor out = torch::empty_like(queries);
  const torch::Tensor& keys = pool_.keys(layer.layer);
  const torch::Tensor& values = pool_.values(layer.layer);
  const cpu::KvLayerView kv{keys.data_ptr(), values.data_ptr(), kv_type_, keys.size(1),
                            keys.size(2)};
  const int64_t heads = queries.size(1), row_elements = heads * queries.size(2);
  const cpu::AttentionSpec spec{heads, static_cast<float>(layer.scale),
                                static_cast<float>(layer.softcap), layer.window};
  const cpu::Isa isa = cpu::ActiveIsa();
  const float* q_data = queries.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  // One item per row and key/value head: a decode step of a few rows still fills the threads.
  const int64_t items = queries.size(0) * kv.kv_heads;
  at::parallel_for(0, items, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / kv.kv_heads, kv_head = item % kv.kv_heads;
      const auto [run, row_in_run] = row_run_[row];
      cpu::AttendRow(isa, kv, spec, runs_[run], row_in_run, kv_head, q_data + row * row_elements,
                     out_data + row * row_elements);
    }
  });
  return out;
}

}  // namespace gpeserve::model
