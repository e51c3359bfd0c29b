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
// The pool's spare block depot (spare_block_depot.h) is striped the same way, for the same
// pipelines: the thread that ends shared leases hands its blocks to its home stripe, and the
// thread that begins them soon looks there first.
//
// The hints are plain thread-local numbers, one set per thread for every depot: they choose
// where to look, never what is correct (every take still scans all stripes before giving up).
// A depot reduces them modulo its stripe count.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>

#include "evpool/detail/node_arena.h"

namespace evpool::detail {

struct DepotStripeHints {
  static constexpr std::uint32_t kUnassigned = ~std::uint32_t{0};
  std::uint32_t home = kUnassigned;  ///< where this thread pushes
  std::uint32_t filled_from = 0;     ///< where it last found a filled magazine
  std::uint32_t empty_from = 0;      ///< where it last found an empty one
  std::uint32_t bundles_from = 0;    ///< where it last found a bundle of spare shared-lease blocks
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
    hints.filled_from = hints.empty_from = hints.bundles_from = hints.home;
  }
  return hints;
}

/// The calling thread's home stripe in a depot of `Stripes` stripes.
template <std::uint32_t Stripes>
std::uint32_t home_stripe() noexcept {
  static_assert(Stripes >= 1 && std::has_single_bit(Stripes), "stripes are picked with a mask");
  if constexpr (Stripes == 1) return 0;
  return depot_stripe_hints().home & (Stripes - 1);
}

struct FoundInStripe {
  std::uint32_t index;   ///< the node popped, or kNilIndex
  std::uint32_t stripe;  ///< where it was found (0 if nowhere)
};

/// Pops from the stripe the calling thread's `hint` names, then from the others in turn, and
/// points the hint at the stripe where a node was found. `pop(stripe)` pops one stack of that
/// stripe. {kNilIndex, 0} if each stack was empty when looked at: the scan is no snapshot, so a
/// node pushed meanwhile to a stripe already passed is missed. With one stripe no hint is read.
template <std::uint32_t Stripes, class Pop>
FoundInStripe pop_from_first_stripe_found(std::uint32_t DepotStripeHints::*hint, Pop pop) noexcept {
  static_assert(Stripes >= 1 && std::has_single_bit(Stripes), "stripes are picked with a mask");
  if constexpr (Stripes == 1) return {pop(0u), 0};
  std::uint32_t &hinted = depot_stripe_hints().*hint;
  const std::uint32_t first = hinted;  // read once: the scan covers every stripe whatever moves the hint
  for (std::uint32_t i = 0; i < Stripes; ++i) {
    const std::uint32_t stripe = (first + i) & (Stripes - 1);
    const std::uint32_t index = pop(stripe);
    if (index != kNilIndex) {
      hinted = stripe;
      return {index, stripe};
    }
  }
  return {kNilIndex, 0};
}

}  // namespace evpool::detail
