// evpool: the fence pair that lets a cache's owner announce itself without a full fence, while a
// purger that must see the announcement pays for both. Private to the library.
//
// Design rationale
// ----------------
// A per-thread cache is touched by its owner on every Get and Put, and by a purger (Purge, Trim,
// the pool's destructor) a few times in the program's life. They exclude each other with two words
// per cache, Dekker style (see thread_cache.h):
//
//   owner:  busy = 1;  FENCE_O;  if (bypass) back off        purger:  bypass = 1;  FENCE_P;  wait while busy
//
// Each side stores its word, then loads the other's. Without fences both loads may see 0 (x86
// reorders a store with a later load; Arm reorders everything), and the owner would fill a
// magazine that the purger is emptying. A full fence on each side fixes it, but costs the owner
// tens of cycles on every call (mfence or a locked instruction), which is the price the cache
// exists to avoid.
//
// The asymmetric pair moves the whole cost to the rare side: the owner needs only a compiler
// barrier, and the purger calls membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every
// running thread of the process execute a full barrier (an IPI) before it returns; a thread that is
// not running passes through one when it is switched out. So either the owner's load comes after
// that barrier and sees bypass = 1, or its store of busy came before it and the purger sees busy = 1.
// This is folly's asymmetric_thread_fence_light/heavy and the scheme of the kernel's sys_membarrier
// documentation; it needs Linux 4.14 or later and a one-time registration per process (kept across
// fork()).
//
// Where membarrier is missing (an old kernel, a seccomp filter that refuses it), owners must fence
// fully. The first pool with caches finds out, once; the owner learns it without a test of its
// own: a cache's "open" state is then kOpenFenced rather than kOpen, so the owner's one compare of
// its bypass word fails and its slow path fences and looks again (thread_cache.h).
//
// ThreadSanitizer models neither membarrier nor std::atomic_thread_fence. A TSan build therefore
// uses SymmetricFence (chosen by the pool policy): the owner's announcement is a seq_cst exchange
// and both loads are seq_cst, so the total order of seq_cst operations gives the same exclusion,
// with happens-before edges TSan can see. Production code never pays for it.
#pragma once

#include <atomic>

#include "evpool/export.h"

namespace evpool::detail {

/// Registers the process for membarrier once; false if owners must use full fences instead.
/// Thread-safe; the answer is computed once per process.
EVPOOL_API bool asymmetric_fence_available() noexcept;

/// The heavy side: after it returns, every store made by any thread of this process before that
/// thread's last compiler barrier is visible to the caller, or that thread's later loads see the
/// caller's earlier stores. A full fence when asymmetric_fence_available() is false.
EVPOOL_API void heavy_fence() noexcept;

// Each fence is a policy (pool_policy.h) of four members: `announce(busy)`, the owner's store and
// its half of the pair; `purger_fence()`, the purger's half; `owners_fence_fully()`, whether the
// owner must follow announce() with `owner_full_fence()` after all (then the cache makes it, on its
// slow path). All are thread-safe; announce() and owner_full_fence() are lock-free, the other two
// may block in their first call while the process registers for membarrier.

/// The production pair: a compiler barrier for owners, membarrier for purgers.
struct AsymmetricFence {
  template <class Atomic>
  [[gnu::always_inline]] static void announce(Atomic &busy) noexcept {
    busy.store(1, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the owner's half of the pair
  }
  static void purger_fence() noexcept { heavy_fence(); }
  static bool owners_fence_fully() noexcept { return !asymmetric_fence_available(); }
  static void owner_full_fence() noexcept { std::atomic_thread_fence(std::memory_order_seq_cst); }
};

/// The ThreadSanitizer pair: seq_cst on both sides, nothing TSan cannot model.
struct SymmetricFence {
  template <class Atomic>
  [[gnu::always_inline]] static void announce(Atomic &busy) noexcept {
    busy.exchange(1, std::memory_order_seq_cst);
  }
  static void purger_fence() noexcept {}
  static bool owners_fence_fully() noexcept { return false; }
  static void owner_full_fence() noexcept {}  // never needed: announce() is a seq_cst exchange
};

}  // namespace evpool::detail
