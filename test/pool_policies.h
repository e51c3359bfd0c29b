// The two configurations every pool test runs under: per-thread caches on (DefaultPoolPolicy,
// magazines filled to 32 events, growing to 256) and off (NoCachePolicy<>, the plain lock-free
// pool). Typed tests take BothPolicies with PolicyName; value-parameterised ones carry a `cached`
// flag and call with_policy.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
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

struct PolicyName {
  template <class Policy>
  static std::string GetName(int) {
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
