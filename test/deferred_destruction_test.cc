// Put and the end of a lease call no backend (no driver) on any thread: what they cannot keep is
// retired, and destroyed on a call that may call the driver (detail/retired_handles.h). The thread
// that Puts is marked driver-free, as CUDA's own threads are; the backend counts any create or
// destroy made there.
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "pool_policies.h"
#include "support/driver_free_threads.h"
#include "support/idle_events.h"

namespace evpool {
namespace {

using test::BothPolicies;
using test::DriverFreeCheckingBackend;
using test::PolicyName;

template <class Policy>
class DeferredDestruction : public ::testing::Test {
 protected:
  using Pool = BasicHandlePool<DriverFreeCheckingBackend, Policy>;
  using Event = HostBackend::Event;
};
TYPED_TEST_SUITE(DeferredDestruction, BothPolicies, PolicyName);

// Runs `body` on a new thread marked driver-free for its whole life, its exit included.
template <class Body>
void on_driver_free_thread(Body &&body) {
  std::thread([&] {
    test::this_thread_is_driver_free() = true;
    body();
  }).join();
}

TYPED_TEST(DeferredDestruction, PutsOverTheIdleLimitRetireAndTrimDestroysOnItsOwnThread) {
  HostBackend counters(1);
  DriverFreeCheckingBackend backend(counters);
  constexpr std::size_t kLimit = 4, kGot = 1000;  // several of the largest magazines over the limit
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, kLimit);
  std::vector<typename TestFixture::Event> got;
  for (std::size_t i = 0; i < kGot; ++i) got.push_back(pool.Get(0));
  on_driver_free_thread([&] {
    for (auto &event : got) pool.Put(std::move(event));
  });
  EXPECT_EQ(backend.calls_on_driver_free_threads(), 0) << "a Put (or its thread's exit) called the backend";
  const DeviceStats before = pool.stats().devices[0];
  EXPECT_EQ(before.destroyed, 0u);
  EXPECT_GE(before.retired, kGot - kLimit - test::kPerThreadCacheBound<TypeParam>);
  EXPECT_EQ(before.outstanding, 0);
  pool.Trim(kLimit);
  const DeviceStats after = pool.stats().devices[0];
  EXPECT_EQ(after.retired, 0u);
  EXPECT_EQ(after.destroyed, before.retired) << "Trim destroys the retired events, on the caller's thread";
  EXPECT_EQ(counters.created() - counters.destroyed(), after.idle);
}

TYPED_TEST(DeferredDestruction, LeasesEndingAfterTheirPoolCallNoBackendAndTheDeferredWorkEndsThePool) {
  HostBackend counters(1);
  DriverFreeCheckingBackend backend(counters);
  std::optional<typename TestFixture::Pool> pool(std::in_place, backend, HostBackend::kDefaultOptions, 2);
  std::vector<typename TestFixture::Pool::unique_lease> leases;
  for (int i = 0; i < 300; ++i) leases.push_back(pool->Lease(0));
  auto shared = pool->LeaseShared(0);
  pool.reset();  // on this thread: destroys what was idle
  on_driver_free_thread([&] {
    leases.clear();
    shared.reset();  // the last lease: the pool's end is deferred
  });
  EXPECT_EQ(backend.calls_on_driver_free_threads(), 0) << "a lease's end called the backend";
  EXPECT_LT(counters.destroyed(), counters.created());
  run_deferred_work();
  EXPECT_EQ(counters.created(), counters.destroyed()) << "the deferred end of the pool destroys its events";
}

TYPED_TEST(DeferredDestruction, AGetThatFindsNoIdleEventHandsARetiredOneOutInsteadOfCreating) {
  HostBackend counters(1);
  DriverFreeCheckingBackend backend(counters);
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, 1);
  testing_support::fill(pool, 0, 600);
  const std::uint64_t created = counters.created();
  const DeviceStats before = pool.stats().devices[0];
  const std::uint64_t kept = before.idle + before.retired;
  ASSERT_GT(before.retired, 0u);
  // Every event the pool keeps (idle or retired) is handed out before it creates one, and none is
  // destroyed on the way: no window has shown them surplus (retired_handles.h).
  std::vector<typename TestFixture::Event> got;
  for (std::uint64_t i = 0; i < kept; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(counters.created(), created) << "a Get created while a retired event was kept";
  EXPECT_EQ(counters.destroyed(), 0u) << "a Get destroyed a retired event that the next Gets needed";
}

// A Get off its fast path runs the deferred work, any pool's (deferred_work.h): here the end of a
// pool destroyed while a lease was out, which destroys the pool's events. Both ways off the fast
// path: a Get that finds the depot empty (with caches, after its refill failed), and, with caches,
// a Get that refills its cache from the depot (reserved there first).
TYPED_TEST(DeferredDestruction, AnyPoolsGetOffItsFastPathRunsTheDeferredWork) {
  for (const bool refills : {false, true}) {
    HostBackend counters(1);
    DriverFreeCheckingBackend backend(counters);
    typename TestFixture::Pool other(backend);
    if (refills) other.Reserve(0, 1);
    std::optional<typename TestFixture::Pool> gone(std::in_place, backend);
    auto lease = gone->Lease(0);
    gone.reset();
    lease.reset();  // the pool's end is deferred
    ASSERT_TRUE(detail::deferred_work_waiting());
    std::thread([&] { other.Put(other.Get(0)); }).join();  // a new thread's first Get: off its fast path
    const char *way = refills ? "a Get that refilled its cache" : "a Get that found the depot empty";
    EXPECT_FALSE(detail::deferred_work_waiting()) << way << " left the deferred work waiting";
    EXPECT_EQ(counters.destroyed(), 1u) << way << ": the deferred end of the pool destroys its event";
    run_deferred_work();  // what a failing Get left, so that nothing deferred outlives the case
  }
}

// Trim runs the deferred work before it trims, so that what a destroyed graph or pool deferred is
// trimmed too, by any pool's Trim.
TYPED_TEST(DeferredDestruction, AnyPoolsTrimRunsTheDeferredWork) {
  HostBackend counters(1);
  DriverFreeCheckingBackend backend(counters);
  std::optional<typename TestFixture::Pool> gone(std::in_place, backend);
  auto lease = gone->Lease(0);
  gone.reset();
  lease.reset();  // the pool's end is deferred
  ASSERT_TRUE(detail::deferred_work_waiting());
  typename TestFixture::Pool other(backend);
  other.Trim(0);
  EXPECT_FALSE(detail::deferred_work_waiting());
  EXPECT_EQ(counters.created(), counters.destroyed());
}

}  // namespace
}  // namespace evpool
