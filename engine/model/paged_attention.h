// Attention over the paged KV cache: the AttentionContext the engine uses. A forward batch is
// a sequence of segments (one session's read chunk or write tokens each); every token of a
// segment sees the segment's context (cached keys chosen by the caller, e.g. the source group
// for a read, source then target group for a write) and the segment's own tokens causally (or
// a leading block of them in both directions).
// The new K/V are written into the pool at the caller's slots before attention, so a later
// forward sees them through the block tables. A windowed layer (LayerAttention::window = W)
// gathers only the last W - 1 context keys of a segment (no row sees more) and keeps each row's
// last W visible keys, so its cost stays bounded by W however long the context grows.
// On the CPU (fp32 activations) the rows read their keys in place from the pool instead
// (cpu_attention.h: no gathered copies, no mask tensors, one parallel loop per layer), unless
// the environment variable GPESERVE_CPU_ATTENTION is "libtorch" (to compare the two in one run).
//
// Thread-safety: one instance per forward call, on the engine thread.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "engine/kernels/cpu_attention.h"
#include "engine/kv/kv_pool.h"
#include "engine/model/attention.h"

namespace gpeserve::model {

struct AttentionSegment {
  int64_t begin = 0;                   // first row of the segment in the batch
  int64_t length = 0;                  // rows
  std::vector<int64_t> context_slots;  // cached keys every row sees, in key order
  std::vector<int64_t> new_slots;      // where the rows' K/V go (length entries)
  int64_t noncausal = 0;               // the first rows see each other both ways (a block
                                       // fed without a mask); the rest causally
};

class PagedAttention : public AttentionContext {
 public:
  // REQUIRES: segments cover the batch rows in order, without gaps.
  PagedAttention(kv::KvPool& pool, const std::vector<AttentionSegment>& segments);

  torch::Tensor Attend(const LayerAttention& layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v) override;

  // Whether a CPU pool is read in place: true unless GPESERVE_CPU_ATTENTION is "libtorch" (read
  // once).
  static bool InPlaceOnCpu();

 private:
  struct Prepared {
    int64_t begin, length, context;
    torch::Tensor key_slots;  // context then new slots, on the pool's device
    torch::Tensor allowed;    // [length, context + length]
  };
  // The segments as a layer with `window` sees them (made on first use per window).
  const std::vector<Prepared>& ForWindow(int64_t window);
  // The attention of every row with cpu_attention's kernel.
  torch::Tensor AttendInPlace(const LayerAttention& layer, const torch::Tensor& q);

  kv::KvPool& pool_;
  torch::Tensor new_slots_;  // all rows' slots in row order
  std::vector<Prepared> segments_;
  std::map<int64_t, std::vector<Prepared>> windowed_;
  // For AttendInPlace (empty unless it applies; then segments_ is): each segment's key slots
  // and run, and each row's run and place in it.
  std::vector<std::vector<int64_t>> host_keys_;
  std::vector<cpu::AttentionRun> runs_;
  std::vector<std::pair<int32_t, int64_t>> row_run_;
  cpu::WeightType kv_type_ = cpu::WeightType::kF32;  // the pool's elements
};

}  // namespace gpeserve::model
