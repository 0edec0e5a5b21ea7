// The instruction sets this CPU runs, slowest first: the kernel tests run each of them, so an
// AVX-512 machine tests its AVX2 and scalar paths too.
#pragma once

#include <vector>

#include "engine/kernels/cpu_matmul.h"

namespace gpeserve::model::cpu::testing {

inline std::vector<Isa> IsasHere() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(DetectedIsa())) isas.push_back(isa);
  }
  return isas;
}

}  // namespace gpeserve::model::cpu::testing
