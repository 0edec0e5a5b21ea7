// Attention of a step's new rows over the paged KV cache on the CPU, read in place: each row
// takes its visible keys straight from the pool's slots, so a step costs no gathered copy of
// every session's keys, no mask tensor and no chain of small library calls per session and
// layer (which cost a many-session step more than its attention's arithmetic: issue 45, the
// cost of a step outside the matmuls).
//
// Rows come in runs (one session's read chunk or write tokens): row r of a run sees the run's
// `context` keys, then the run's own keys 0..r (or 0..noncausal-1 when r < noncausal), all in
// key order: a prefix of the run's key list. A window W keeps the last W of those.
//
// Scores, softmax and the weighted sum are fp32 whatever the pool holds (bf16 and fp16 keys
// widen exactly); each row is computed alone in one order, so a row's result does not depend on
// the other rows of its step.
//
// Thread-safety: pure functions; callers split rows and key/value heads across threads.
#pragma once

#include <cstdint>

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu {

// One layer of the pool: K and V, [slots, kv_heads, head_dim] row-major, fp32, bf16 or fp16.
struct KvLayerView {
  const void* k = nullptr;
  const void* v = nullptr;
  WeightType type = WeightType::kF32;
  int64_t kv_heads = 0, head_dim = 0;
};

// What one layer's attention computes besides q and the keys.
struct AttentionSpec {
  int64_t heads = 0;     // query heads, a multiple of kv_heads (grouped-query attention)
  float scale = 1.0f;    // multiplies q.k
  float softcap = 0.0f;  // > 0: scores become softcap * tanh(scores / softcap)
  int64_t window = 0;    // > 0: a row sees only the last `window` of its visible keys
};

// A run of rows that share their keys: key_slots holds context + length slots (the context's,
// then the run's own rows').
struct AttentionRun {
  const int64_t* key_slots = nullptr;
  int64_t context = 0, length = 0;
  int64_t noncausal = 0;  // the first rows see each other both ways
};

// The keys row r of `run` sees: [begin, end) of its key list.
struct KeyRange {
  int64_t begin, end;
};
KeyRange VisibleKeys(const AttentionRun& run, int64_t row, int64_t window);

// For row `row` of `run` and the query heads of key/value head `kv_head`
// (kv_head * group .. (kv_head + 1) * group - 1, group = heads / kv_heads):
//   out[h] = softmax_j(cap(scale * q[h] . K[j])) V[j] over the visible keys j
// q and out: the row's [heads, head_dim] fp32 values. Reads the pool only at the run's slots.
// REQUIRES: the spec's window, if any, is >= 1; the slots lie inside the pool.
void AttendRow(Isa isa, const KvLayerView& kv, const AttentionSpec& spec, const AttentionRun& run,
               int64_t row, int64_t kv_head, const float* q, float* out);

}  // namespace gpeserve::model::cpu
