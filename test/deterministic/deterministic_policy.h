// The pool policy that hands the core's atomics to the DeterministicScheduler.
//
// It derives from a production policy and overrides only what the scheduler needs, so that members
// the core gains later (cache_capacity, a fence policy, ...) are inherited unchanged:
// - `atomic`: DeterministicAtomic, a yield point before every operation of the stacks' heads and
//   links, the arena's counter and chunk table, the idle counts and the lease reference counts;
// - `tag_bits`: the ABA tag width under test (the production width unless a test narrows it to
//   show what a narrow tag lets through);
// - `backoff`: none, since spinning adds steps but no interleavings.
#pragma once

#include <atomic>

#include "deterministic_atomic.h"
#include "deterministic_scheduler.h"
#include "evpool/detail/backoff.h"
#include "evpool/detail/node_arena.h"
#include "evpool/pool_policy.h"

namespace evpool::testing_support {

/// How often a pool under a DeterministicPolicy reported its depot corrupt.
inline std::atomic<int> depot_corruptions_reported{0};

template <unsigned TagBits = detail::kMaxTagBits, class Base = DefaultPoolPolicy>
struct DeterministicPolicy : Base {
  template <class T>
  using atomic = DeterministicAtomic<T>;
  static constexpr unsigned tag_bits = TagBits;
  using backoff = detail::NoBackoff;
  // Two stripes at most: enough to take the striped paths (a take that finds its first stripe
  // empty and moves on), few enough to keep the schedules countable.
  static constexpr unsigned depot_stripes = Base::depot_stripes < 2 ? Base::depot_stripes : 2;
  // A thread that waits for another (the registry lock, a call in progress) lets another run.
  static void spin_wait() noexcept { DeterministicScheduler::yield_to_others(); }
  // A corrupted depot is a finding to count, not a reason to abort the whole suite.
  static void report_corruption(const char *) noexcept {
    depot_corruptions_reported.fetch_add(1, std::memory_order_relaxed);
  }
};

/// Caches whose magazines change hands with the depot within a few operations.
struct SmallMagazinesPolicy : DefaultPoolPolicy {
  // Filled to 1 at first, to 2 after two trades: the schedules cover growth too.
  static constexpr unsigned cache_capacity = 2;
  static constexpr unsigned cache_start_capacity = 1;
  static constexpr unsigned cache_growth_trades = 2;
};

/// Every Get and Put on the shared stacks: what the stack-level scenarios (ABA) are about.
template <unsigned TagBits = detail::kMaxTagBits>
using DeterministicNoCachePolicy = DeterministicPolicy<TagBits, NoCachePolicy<>>;

}  // namespace evpool::testing_support
