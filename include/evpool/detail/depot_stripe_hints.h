// evpool: which stripe of a depot (depot.h) the calling thread uses. Private to the library.
//
// Design rationale
// ----------------
// A depot with several stripes spreads the threads that trade magazines with it over several
// pairs of stack heads. Each thread pushes to its home stripe, given out round-robin the first
// time the thread needs one, so that threads that give magazines back land on different heads.
// A thread that takes looks first where it found a magazine last time, then at the other stripes
// in turn: in a producer/consumer pipeline the producer soon looks first at the stripe its
// consumer pushes to, and the two share a head pair with few other threads, instead of every
// thread of the process sharing one.
//
// The hints are plain thread-local numbers, one set per thread for every depot: they choose
// where to look, never what is correct (every take still scans all stripes before giving up).
// A depot reduces them modulo its stripe count.
#pragma once

#include <atomic>
#include <cstdint>

namespace evpool::detail {

struct DepotStripeHints {
  static constexpr std::uint32_t kUnassigned = ~std::uint32_t{0};
  std::uint32_t home = kUnassigned;  ///< where this thread pushes
  std::uint32_t filled_from = 0;     ///< where it last found a filled magazine
  std::uint32_t empty_from = 0;      ///< where it last found an empty one
};

inline std::atomic<std::uint32_t> next_home_stripe{0};
inline constinit thread_local DepotStripeHints this_thread_stripe_hints;

/// The calling thread's hints, with a home stripe. Constant-initialised: safe to use during the
/// thread's teardown (a cache's exit flush) and from static destructors.
inline DepotStripeHints &depot_stripe_hints() noexcept {
  DepotStripeHints &hints = this_thread_stripe_hints;
  if (hints.home == DepotStripeHints::kUnassigned) [[unlikely]] {
    // Relaxed: a round-robin number, ordering nothing.
    hints.home = next_home_stripe.fetch_add(1, std::memory_order_relaxed) & (DepotStripeHints::kUnassigned >> 1);
    hints.filled_from = hints.empty_from = hints.home;
  }
  return hints;
}

}  // namespace evpool::detail
