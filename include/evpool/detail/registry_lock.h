// evpool: the lock around a pool's registry of thread caches. Private to the library.
//
// Taken only off the fast path: when a thread registers its first cache for a pool, and by Purge,
// Trim, the pool's destructor and the fork child's cleanup. A test-and-test-and-set lock that
// yields while it waits, built on `Atomic` so that the deterministic scheduler sees it (a
// std::mutex would block a scheduled thread where the scheduler cannot take control back).
#pragma once

#include <thread>

namespace evpool::detail {

template <template <class> class Atomic>
class RegistryLock {
 public:
  void lock() noexcept {
    // Acquire: everything the previous holder did under the lock is visible to us.
    while (locked_.exchange(true, std::memory_order_acquire))
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  // Release: publishes what we did under the lock to the next holder.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  /// In a fork() child, before any of its threads can hold the lock: a holder in the parent does
  /// not exist here and would never release it.
  void reset_in_child() noexcept { locked_.store(false, std::memory_order_relaxed); }

 private:
  Atomic<bool> locked_{false};
};

}  // namespace evpool::detail
