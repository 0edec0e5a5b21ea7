// Matrix-matrix products for CPU steps too large for cpu_matmul's weights-read-once kernel
// (prefill): oneDNN's sgemm (Debian's libdnnl), which chooses its kernels from the CPU's
// features (CPUID) at run time. OpenBLAS, which libtorch links, chooses them from a core model
// that it misdetects on some VMs (an AVX-512 Xeon read as "Prescott" runs SSE3 kernels), so no
// hot path goes through it; libtorch still calls it for attention's products and training, so
// the binaries log what it detected and warn when that is older than the CPU (BlasCoreReport).
//
// Thread-safety: Sgemm may be called from any thread; it runs on oneDNN's OpenMP threads (the
// count libtorch sets). The reports are pure.
#pragma once

#include <cstdint>
#include <string>

namespace gpeserve::model::cpu {

// y[i, j] = sum_l x[i, l] * w[j, l] for i < m, j < n, l < k (y = x w^T), row-major with the
// given leading dimensions; fp32 throughout. Returns an empty string, or oneDNN's error.
std::string Sgemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, float* y, int64_t ldy);

// The core OpenBLAS detected (openblas_get_corename), or "" when the BLAS libtorch loaded is not
// OpenBLAS.
std::string OpenBlasCore();

// One line for the start-up log: the BLAS libtorch calls and its core, and a warning when that
// core runs an older instruction set than this CPU has (with the environment variable that
// fixes it, OPENBLAS_CORETYPE). `core`: OpenBlasCore().
std::string BlasCoreReport(const std::string& core);

}  // namespace gpeserve::model::cpu
