// The two configurations every pool test runs under: per-thread caches on (DefaultPoolPolicy,
// magazines filled to 32 events, growing to 256) and off (NoCachePolicy<>, the plain lock-free
// pool). Typed tests take BothPolicies with PolicyName; value-parameterised ones carry a `cached`
// flag and call with_policy. The cache's own suites add a third, OwnersFenceFullyPolicy: caches as
// in a process where membarrier is refused (detail/asymmetric_fence.h).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_checks.h"
#include "evpool/pool_policy.h"

namespace evpool::test {

template <class Policy>
inline constexpr bool kCached = Policy::cache_capacity > 0;

/// Whether the pools a test makes without Checks::kOn are checked: the suites run a second time
/// under EVPOOL_CHECKED=1 (tools/test --full), and a checked pool keeps no thread caches
/// (pool_checks.h). A test whose claim is about the caches skips then, giving kNoCachesWhenChecked.
inline bool pools_are_checked() { return detail::checks_requested_by_environment(); }
inline constexpr const char *kNoCachesWhenChecked =
    "EVPOOL_CHECKED=1: checked pools keep no thread caches, which this test is about";

/// Whether pools of `Policy` made without Checks::kOn keep thread caches in this run.
template <class Policy>
bool caches_on() {
  return kCached<Policy> && !pools_are_checked();
}

/// Idle events one thread's cache may hold per device: a loaded and a previous magazine.
template <class Policy>
inline constexpr std::size_t kPerThreadCacheBound = std::size_t{2} * Policy::cache_capacity;

using BothPolicies = ::testing::Types<DefaultPoolPolicy, NoCachePolicy<>>;
/// The stream pool's own policy (magazines of up to 32 streams), and no caches.
using StreamPolicies = ::testing::Types<StreamPoolPolicy, NoCachePolicy<>>;

/// The default fence as it behaves where membarrier is refused: every cache's open state is then
/// kOpenFenced, so each owner_enter takes the fenced path, and the pair rests on the owner's full
/// fence and the purger's, with no membarrier. Under ThreadSanitizer, which models no fence, it
/// keeps SymmetricFence's exchange and makes each full fence a seq_cst read-modify-write. Counts
/// the owners' full fences, so that tests can see the fenced path taken.
struct OwnersFenceFully {
  static inline std::atomic<std::uint64_t> owner_fences{0};
  static inline std::atomic<std::uint32_t> tsan_fence_word{0};
  static constexpr bool kUnderTsan = std::is_same_v<DefaultPoolPolicy::fence, detail::SymmetricFence>;

  template <class Atomic>
  static void announce(Atomic &busy) noexcept {
    if constexpr (kUnderTsan)
      detail::SymmetricFence::announce(busy);
    else
      detail::AsymmetricFence::announce(busy);
  }
  static void purger_fence() noexcept { full_fence(); }
  static bool owners_fence_fully() noexcept { return true; }
  static void owner_full_fence() noexcept {
    full_fence();
    owner_fences.fetch_add(1, std::memory_order_relaxed);  // after the fence: it orders nothing
  }

  /// How many owner full fences this thread's `call()` made (no other thread may fence meanwhile).
  template <class Call>
  static std::uint64_t fences_during(Call &&call) {
    const std::uint64_t before = owner_fences.load();
    call();
    return owner_fences.load() - before;
  }

 private:
  static void full_fence() noexcept {
    if constexpr (kUnderTsan)
      tsan_fence_word.fetch_add(1, std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
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

/// A typed test's pairing of a host backend (events: HostBackend; streams: HostStreamBackend, or
/// any other) with a policy, and its name, "EventsCached", "StreamsUncached" and so on.
template <class BackendType, class PolicyType>
struct BackendAndPolicy {
  using Backend = BackendType;
  using Policy = PolicyType;
};
struct BackendAndPolicyName {
  template <class C>
  static std::string GetName(int) {
    const std::string kind = std::is_same_v<typename C::Backend, HostBackend> ? "Events" : "Streams";
    return kind + PolicyName::GetName<typename C::Policy>(0);
  }
};

/// The fixture of typed tests that need nothing but the pool type on the host backend:
/// `template <class Policy> using MySuite = test::HostPoolTest<Policy>;`
template <class Policy>
class HostPoolTest : public ::testing::Test {
 protected:
  using Pool = BasicHandlePool<HostBackend, Policy>;
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
