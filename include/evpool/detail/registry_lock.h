// evpool: the lock around a pool's registry of thread caches. Private to the library.
//
// Taken only off the fast path: when a thread registers its first cache for a pool, and by Purge,
// Trim, the pool's destructor and the fork child's cleanup. A test-and-test-and-set lock that calls
// `Wait::spin_wait()` while it waits: std::this_thread::yield in production, a hand-over to another
// thread under the deterministic scheduler, which could neither take control back from a thread
// blocked in a std::mutex nor stop a plain spin from running forever. The lock word itself is a
// std::atomic: what the registry protects is bookkeeping, not the algorithm under test, and every
// atomic step a scheduled test sees multiplies the interleavings it must explore.
#pragma once

#include <atomic>

namespace evpool::detail {

template <class Wait>
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
  std::atomic<bool> locked_{false};
};

}  // namespace evpool::detail
