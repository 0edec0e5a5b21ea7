// ThreadSanitizer builds only (GPESERVE_TSAN): absl::Status's reference count, compiled here with
// -fsanitize=thread so that TSan sees it.
//
// Debian's libabsl_status is not instrumented: when two threads share a status (an engine event
// copied to another thread) and the last owner frees it, TSan sees the free but not the atomic
// decrement that orders it after the other owner's reads, and reports a race that is none. This
// definition of the out-of-line release (the same as abseil 20220623's) interposes the library's:
// the executable's symbol wins in the dynamic linker's lookup.
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"

namespace absl {
ABSL_NAMESPACE_BEGIN

void Status::UnrefNonInlined(uintptr_t rep) {
  status_internal::StatusRep* r = RepToPointer(rep);
  if (r->ref.load(std::memory_order_acquire) == 1 ||
      r->ref.fetch_sub(1, std::memory_order_acq_rel) - 1 == 0) {
    delete r;
  }
}

ABSL_NAMESPACE_END
}  // namespace absl
