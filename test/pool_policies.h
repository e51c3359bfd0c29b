// The two configurations every pool test runs under: per-thread caches on (DefaultPoolPolicy,
// magazines filled to 32 events, growing to 256) and off (NoCachePolicy<>, the plain lock-free
// pool). Typed tests take BothPolicies with PolicyName; value-parameterised ones carry a `cached`
// flag and call with_policy. The cache's own suites add a third, OwnersFenceFullyPolicy: caches as
// in a process where membarrier is refused (detail/asymmetric_fence.h).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"

namespace evpool::test {

template <class Policy>
inline constexpr bool kCached = Policy::cache_capacity > 0;

/// Idle events one thread's cache may hold per device: a loaded and a previous magazine.
template <class Policy>
inline constexpr std::size_t kPerThreadCacheBound = std::size_t{2} * Policy::cache_capacity;

using BothPolicies = ::testing::Types<DefaultPoolPolicy, NoCachePolicy<>>;

/// The default fence, as it behaves where membarrier is refused: every cache's open state is then
/// kOpenFenced, so each owner_enter takes the fenced path, and the purger fences fully as well.
struct OwnersFenceFully {
  using Base = DefaultPoolPolicy::fence;  // SymmetricFence under ThreadSanitizer
  template <class Atomic>
  static void announce(Atomic &busy) noexcept {
    Base::announce(busy);
  }
  static void purger_fence() noexcept {
    Base::purger_fence();
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  static bool owners_fence_fully() noexcept { return true; }
};
struct OwnersFenceFullyPolicy : DefaultPoolPolicy {
  using fence = OwnersFenceFully;
};

/// The configurations of the cache's own suites.
using CachePolicies = ::testing::Types<DefaultPoolPolicy, NoCachePolicy<>, OwnersFenceFullyPolicy>;

struct PolicyName {
  template <class Policy>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<Policy, OwnersFenceFullyPolicy>) return "CachedFencedFully";
    return kCached<Policy> ? "Cached" : "Uncached";
  }
};

/// The fixture of typed tests that need nothing but the pool type on the host backend:
/// `template <class Policy> using MySuite = test::HostPoolTest<Policy>;`
template <class Policy>
class HostPoolTest : public ::testing::Test {
 protected:
  using Pool = BasicEventPool<HostBackend, Policy>;
};

inline std::string policy_suffix(bool cached) { return cached ? "_cached" : "_uncached"; }

/// Calls `body.template operator()<Policy>()` with the policy that `cached` names.
template <class Body>
void with_policy(bool cached, Body &&body) {
  if (cached)
    std::forward<Body>(body).template operator()<DefaultPoolPolicy>();
  else
    std::forward<Body>(body).template operator()<NoCachePolicy<>>();
}

}  // namespace evpool::test
