#include "engine/kernels/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpeserve::model::cpu {

namespace internal {
// The vector steps of AttendRow for AVX2 + FMA + F16C (cpu_attention_avx2.cc; AVX-512 CPUs run
// them too: a head is 64-256 values, too short for wider vectors to pay).
void WidenAvx2(WeightType type, const void* src, int64_t n, float* dst);
float DotAvx2(const float* a, const float* b, int64_t n);
void AxpyAvx2(float a, const float* x, float* y, int64_t n);
}  // namespace internal

namespace {

void WidenScalar(WeightType type, const void* src, int64_t n, float* dst) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = type == WeightType::kBF16 ? Bf16ToFloat(h[i]) : HalfToFloat(h[i]);
  }
}

float DotScalar(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void AxpyScalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

struct Steps {
  void (*widen)(WeightType, const void*, int64_t, float*);
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float, const float*, float*, int64_t);
};

const Steps& StepsFor(Isa isa) {
  static constexpr Steps kScalar{WidenScalar, DotScalar, AxpyScalar};
  static constexpr Steps kAvx2{internal::WidenAvx2, internal::DotAvx2, internal::AxpyAvx2};
  return isa == Isa::kScalar ? kScalar : kAvx2;
}

// Element `index` of a pool tensor as fp32 values: in place for fp32, else widened into `buffer`.
const float* Values(const Steps& steps, WeightType type, const void* data, int64_t index, int64_t n,
                    float* buffer) {
  if (type == WeightType::kF32) return static_cast<const float*>(data) + index;
  steps.widen(type, static_cast<const uint16_t*>(data) + index, n, buffer);
  return buffer;
}

}  // namespace

KeyRange VisibleKeys(const AttentionRun& run, int64_t row, int64_t window) {
  const int64_t own = row < run.noncausal ? run.noncausal : row + 1;
  const int64_t end = run.context + own;
  return {window > 0 ? std::max<int64_t>(0, end - window) : 0, end};
}

void AttendRow(Isa isa, const KvLayerView& kv, const AttentionSpec& spec, const AttentionRun& run,
               int64_t row, int64_t kv_head, const float* q, float* out) {
  const Steps& steps = StepsFor(isa);
  const KeyRange keys = VisibleKeys(run, row, spec.window);
  const int64_t n = keys.end - keys.begin, dim = kv.head_dim;
  const int64_t group = spec.heads / kv.kv_heads, slot_elements = kv.kv_heads * dim;
  thread_local std::vector<float> scores, widened, inverse_sum;
  scores.resize(static_cast<size_t>(group * n));
  widened.resize(static_cast<size_t>(dim));
  inverse_sum.resize(static_cast<size_t>(group));
  const float* q0 = q + kv_head * group * dim;
  float* out0 = out + kv_head * group * dim;

  // Every key once, for all the query heads that share it.
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = run.key_slots[keys.begin + j] * slot_elements + kv_head * dim;
    const float* key = Values(steps, kv.type, kv.k, at, dim, widened.data());
    for (int64_t h = 0; h < group; ++h) {
      float s = steps.dot(q0 + h * dim, key, dim) * spec.scale;
      if (spec.softcap > 0) s = std::tanh(s / spec.softcap) * spec.softcap;
      scores[h * n + j] = s;
    }
  }
  for (int64_t h = 0; h < group; ++h) {
    float* s = scores.data() + h * n;
    const float top = *std::max_element(s, s + n);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - top);
      sum += s[j];
    }
    inverse_sum[h] = 1.0f / sum;
    std::fill(out0 + h * dim, out0 + (h + 1) * dim, 0.0f);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = run.key_slots[keys.begin + j] * slot_elements + kv_head * dim;
    const float* value = Values(steps, kv.type, kv.v, at, dim, widened.data());
    for (int64_t h = 0; h < group; ++h) steps.axpy(scores[h * n + j], value, out0 + h * dim, dim);
  }
  for (int64_t h = 0; h < group; ++h) {
    for (int64_t i = 0; i < dim; ++i) out0[h * dim + i] *= inverse_sum[h];
  }
}

}  // namespace gpeserve::model::cpu
