// gpeserve::Mutex and gpeserve::MutexLock: absl's, made visible to ThreadSanitizer.
//
// Debian's abseil is a prebuilt shared library without ThreadSanitizer's annotations, so in a
// -fsanitize=thread build (GPESERVE_TSAN, scripts/sanitize tsan) its locks are invisible: every
// access to guarded data would be reported as a race. Under GPESERVE_TSAN these wrappers tell
// TSan what the lock orders (acquire after Lock, release before Unlock and around waits, acquire
// before a condition is evaluated inside absl); otherwise they are absl's types, at no cost.
// The thread-safety annotations (ABSL_GUARDED_BY ...) work on both.
#pragma once

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#if defined(GPESERVE_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace gpeserve {

#if !defined(GPESERVE_TSAN)

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;

#else

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.Lock();
    __tsan_acquire(this);
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    __tsan_release(this);
    mu_.Unlock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() { mu_.AssertHeld(); }

  void Await(const absl::Condition& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Visible visible{this, &condition};
    __tsan_release(this);
    mu_.Await(absl::Condition(&Visible::Eval, &visible));
    __tsan_acquire(this);
  }
  bool AwaitWithTimeout(const absl::Condition& condition, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    Visible visible{this, &condition};
    __tsan_release(this);
    const bool met = mu_.AwaitWithTimeout(absl::Condition(&Visible::Eval, &visible), timeout);
    __tsan_acquire(this);
    return met;
  }

 private:
  // absl evaluates a waiter's condition under the lock, on the waiter's thread or on the one
  // unlocking, between a release and the next Lock: the evaluation acquires what the last
  // holder released, and releases its reads to the next holder.
  struct Visible {
    Mutex* mutex;
    const absl::Condition* condition;
    static bool Eval(Visible* v) {
      __tsan_acquire(v->mutex);
      const bool met = v->condition->Eval();
      __tsan_release(v->mutex);
      return met;
    }
  };
  absl::Mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

#endif

}  // namespace gpeserve
