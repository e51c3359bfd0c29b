// evpool: the process-wide pools of one pool type, one per key, created on first use and never
// destroyed. Private.
//
// Shared by CUDAEventPool::instance_for (keyed by flags) and CUDAStreamPool::instance_for (keyed
// by flags and priority). Never destroyed, because threads may still use a pool while the process
// exits and the driver reclaims its handles then (PyTorch, RMM and kvikio leak their pools for the
// same reason); so a checked pool reports what is still outstanding at exit instead.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>

namespace evpool::detail {

template <class Pool, std::size_t kSlots>
class ProcessWidePools {
 public:
  /// The pool in `slot` (< kSlots), or the one `make()` returns (new; it validates its options
  /// and may throw, publishing nothing) if the slot is empty. Thread-safe: of two threads that
  /// create at once, one pool is published and the other deleted. Lock-free after the first call.
  template <class Make>
  static Pool &find_or_create(std::size_t slot, Make make) {
    // Acquire: pairs with the release below, so a pool found here is fully constructed.
    if (Pool *pool = pools_[slot].load(std::memory_order_acquire)) return *pool;
    Pool *fresh = make();
    Pool *expected = nullptr;
    if (!pools_[slot].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
      delete fresh;  // another thread won; its pool is the one
      return *expected;
    }
    if (fresh->checked()) {
      // Once, for every checked pool of this type, whenever it is created.
      static const int registered = std::atexit([] {
        for (std::atomic<Pool *> &pool : pools_)
          if (Pool *found = pool.load(std::memory_order_acquire)) found->report_outstanding_at_exit();
      });
      (void)registered;
    }
    return *fresh;
  }

 private:
  static inline std::atomic<Pool *> pools_[kSlots]{};
};

}  // namespace evpool::detail
