// evpool: contention management for the lock-free stacks' retry loops. Private to the library.
//
// A compare-exchange that fails means another thread won the cache line. Retrying at once makes
// every contender pull the line again, so under heavy contention the line ping-pongs and almost
// every attempt fails. Waiting a little, longer after each failure (truncated exponential backoff,
// Anderson 1990; Herlihy & Shavit, ch. 7), lets the winner finish and the line settle. The wait
// spins on the CPU's pause hint and never sleeps or yields, so the stacks stay lock-free: a
// stalled thread still cannot stop others from progressing.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace evpool::detail {

/// One hint to the CPU that we are spinning (x86 PAUSE, Arm YIELD).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#endif
}

/// Spins 1, 2, 4, ... up to kMaxSpins pauses on successive failures of one operation.
class ExponentialBackoff {
 public:
  static constexpr std::uint32_t kMaxSpins = 256;
  static_assert((kMaxSpins & (kMaxSpins - 1)) == 0, "doubling from 1 reaches it exactly");

  void operator()() noexcept {
    for (std::uint32_t i = 0; i < spins_; ++i) cpu_relax();
    if (spins_ < kMaxSpins) spins_ *= 2;
  }

 private:
  std::uint32_t spins_ = 1;
};

/// Retries at once: the classic Treiber stack.
struct NoBackoff {
  void operator()() noexcept {}
};

}  // namespace evpool::detail
