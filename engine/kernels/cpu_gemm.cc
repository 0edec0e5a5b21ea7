#include "engine/kernels/cpu_gemm.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu {

std::string Sgemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, float* y, int64_t ldy) {
  const dnnl_status_t status = dnnl_sgemm('N', 'T', m, n, k, 1.0f, x, ldx, w, ldw, 0.0f, y, ldy);
  if (status == dnnl_success) return "";
  return "oneDNN sgemm failed with status " + std::to_string(static_cast<int>(status));
}

std::string OpenBlasCore() {
  // Looked up, not linked: the project does not link OpenBLAS itself, libtorch does (through
  // Debian's libblas.so.3 alternative, which may be another BLAS).
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return "";
  const char* name = core_name();
  return name != nullptr ? name : "";
}

namespace {

// The instruction set OpenBLAS's kernels for `core` use, as far as ours go (an SSE or AVX core
// counts as scalar: below AVX2). Unknown names count as current (no warning).
Isa CoreIsa(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (std::string_view avx512 : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == avx512) return Isa::kAvx512;
  }
  for (std::string_view old :
       {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "opteron",
        "opteron_sse3", "bobcat", "sandybridge", "bulldozer", "piledriver", "katmai", "coppermine",
        "northwood", "banias", "generic"}) {
    if (core == old) return Isa::kScalar;
  }
  return Isa::kAvx2;  // haswell, zen, steamroller, excavator, ... and names we do not know
}

}  // namespace

std::string BlasCoreReport(const std::string& core) {
  if (core.empty()) return "BLAS under libtorch: not OpenBLAS (core not known)";
  std::string report = "BLAS under libtorch: OpenBLAS, core " + core;
  const Isa cpu = DetectedIsa();
  if (static_cast<int>(CoreIsa(core)) < static_cast<int>(cpu)) {
    report += std::string("; warning: older than this CPU (") + IsaName(cpu) +
              "): libtorch's products (training, gpe logits' attention) run slow; set "
              "OPENBLAS_CORETYPE=" +
              (cpu == Isa::kAvx512 ? "SkylakeX" : "Haswell") + " before starting";
  }
  return report;
}

}  // namespace gpeserve::model::cpu
