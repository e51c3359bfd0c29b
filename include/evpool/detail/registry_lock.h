// evpool: the lock around a pool's registry of thread caches. Private to the library.
//
// Taken only off the fast path: when a thread registers its first cache for a pool, and by Purge,
// Trim, the pool's destructor and the fork child's cleanup. A test-and-test-and-set lock built on
// `Atomic` that calls `Wait::spin_wait()` while it waits (std::this_thread::yield in production),
// so that the deterministic scheduler sees both: a std::mutex would block a scheduled thread where
// the scheduler cannot take control back, and a plain spin would let it run the waiter forever.
#pragma once

namespace evpool::detail {

template <template <class> class Atomic, class Wait>
class RegistryLock {
 public:
  void lock() noexcept {
    // Acquire: everything the previous holder did under the lock is visible to us.
    while (locked_.exchange(true, std::memory_order_acquire))
      while (locked_.load(std::memory_order_relaxed)) Wait::spin_wait();
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
