// evpool: notices that the process is a fork() child, so that a pool forgets its parent's events.
// Private to the library.
//
// Design rationale
// ----------------
// A fork() child inherits the pool's memory, but the parent's CUDA events mean nothing in the
// child: handing one out fails, destroying one may touch the parent's driver state. So the first
// pool operation in a child must forget (not destroy) every idle event.
//
// The process keeps a fork generation, bumped by a pthread_atfork child handler (src/fork_generation.cc).
// Each pool remembers the generation its events belong to; every call that does not find its
// cache through the thread's hint (the hint misses, or the cache is bypassed) compares the two
// words: a relaxed load of the process word (written only inside fork) and an acquire load of the
// pool's (written once per fork; acquire so that a thread seeing the new generation also sees the
// forgetting that preceded it). Both are plain loads on x86 and read lines nobody writes; the
// forgetting is a call out of line that the test passes nothing to. A call that finds its cache
// through the hint makes no test at all: the hint does not survive fork()
// (thread_cache_directory.h).
//
// Forgetting runs once per child, while other threads of the child may already call into the
// pool: one thread becomes the cleaner with a compare-exchange and the others wait (yielding) until
// it publishes the new generation. The state word records in which generation the cleaner started,
//
//    63                          32 31                           0
//   +------------------------------+------------------------------+
//   | generation the events are of | generation of the cleaner,   |
//   |                              | or kNoCleaner                |
//   +------------------------------+------------------------------+
//
// so that a child forked while its parent was cleaning (the cleaner thread does not exist in the
// child) does not wait for it forever: a cleaner of another generation is not waited for.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "evpool/export.h"

namespace evpool::detail {

/// Bumped in each fork() child by a pthread_atfork handler (src/fork_generation.cc).
EVPOOL_API extern std::atomic<std::uint32_t> process_fork_generation;

/// The process's fork generation: 0 in the original process, +1 in each fork() child. Inline:
/// every call that misses its thread's cache hint reads it, and every lease's end.
inline std::uint32_t fork_generation() noexcept {
  // Relaxed: the child handler runs in the child's only thread before fork() returns there, so
  // that thread sees the new value; threads the child starts later are ordered by their creation.
  return process_fork_generation.load(std::memory_order_relaxed);
}

class ForkGuard {
 public:
  ForkGuard() noexcept : state_(pack(fork_generation(), kNoCleaner)) {}

  /// Whether this is a fork() child that has not forgotten its parent's events yet: the caller
  /// must then call forget_once() before it proceeds. Thread-safe, wait-free: two loads.
  [[gnu::always_inline]] bool stale() const noexcept {
    // Acquire: once we see the current generation, we also see the forgetting that preceded it.
    return owner_of(state_.load(std::memory_order_acquire)) != fork_generation();
  }

  /// Calls `forget()` exactly once in each forked child, before any caller of forget_once() in
  /// that child returns. Thread-safe; lock-free except for the wait while another thread forgets.
  /// Call it out of line, behind stale(), so that the fast path keeps no closure for `forget`.
  template <class Forget>
  void forget_once(Forget &&forget) noexcept {
    std::uint64_t state = state_.load(std::memory_order_acquire);
    const std::uint32_t now = fork_generation();
    for (;;) {
      if (owner_of(state) == now) return;
      if (cleaner_of(state) != now) {
        // Acquire on success: forget() reads the stacks that other threads of this child changed.
        if (state_.compare_exchange_strong(state, pack(owner_of(state), now), std::memory_order_acquire,
                                           std::memory_order_acquire)) {
          forget();
          // Release: waiters that see the new generation see the forgotten stacks.
          state_.store(pack(now, kNoCleaner), std::memory_order_release);
          return;
        }
        continue;  // `state` was reloaded by the failed compare-exchange
      }
      std::this_thread::yield();
      state = state_.load(std::memory_order_acquire);
    }
  }

 private:
  static constexpr std::uint32_t kNoCleaner = 0xFFFF'FFFF;

  static constexpr std::uint64_t pack(std::uint32_t owner, std::uint32_t cleaner) noexcept {
    return std::uint64_t{owner} << 32 | cleaner;
  }
  static constexpr std::uint32_t owner_of(std::uint64_t state) noexcept {
    return static_cast<std::uint32_t>(state >> 32);
  }
  static constexpr std::uint32_t cleaner_of(std::uint64_t state) noexcept {
    return static_cast<std::uint32_t>(state);
  }

  std::atomic<std::uint64_t> state_;
};

}  // namespace evpool::detail
