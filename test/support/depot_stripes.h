// evpool test support: depots whose stripes a test can predict. A thread's home stripe comes
// from a process-wide round robin (depot_stripe_hints.h), so which stripe a test's threads use
// depends on every thread that used a pool before. Private; tests only.
#pragma once

#include <atomic>

#include "evpool/detail/depot_stripe_hints.h"

namespace evpool::testing_support {

/// Makes the depots' choice of stripes repeat from run to run: the round robin of home stripes
/// starts again and the calling thread (the one that sets a scenario up) forgets its hints, so
/// that its next call takes home stripe 0, and the threads it then starts 1, 2, ... in the order
/// they first take from or give to a striped depot (of events or of spare blocks), of any pool. Deterministic schedules need it before each run's setup: an
/// exhaustive strategy replays a recorded schedule, and a run whose threads met other stripes
/// would take other steps (the replay then picks a thread that has finished, and the scheduler
/// waits forever).
inline void restart_depot_stripe_hints() noexcept {
  detail::next_home_stripe.store(0, std::memory_order_relaxed);
  detail::this_thread_stripe_hints = detail::DepotStripeHints{};
}

}  // namespace evpool::testing_support
