// Unique and shared leases, through HostBackend, with per-thread caches on and off.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "tracked_backend.h"

namespace evpool {
namespace {

using test::BothPolicies;
using test::PolicyName;

template <class Policy>
using UniqueLease = test::HostPoolTest<Policy>;
TYPED_TEST_SUITE(UniqueLease, BothPolicies, PolicyName);

template <class Policy>
using SharedLease = test::HostPoolTest<Policy>;
TYPED_TEST_SUITE(SharedLease, BothPolicies, PolicyName);

TYPED_TEST(UniqueLease, ReturnsItsEventUnderItsOwnDeviceWhenItDies) {
  HostBackend backend(3);
  typename TestFixture::Pool pool(backend);
  HostBackend::handle_type token = 0;
  {
    backend.set_current_device(0);
    auto lease = pool.Lease(2);
    ASSERT_TRUE(lease);
    token = lease.get();
    EXPECT_EQ(lease.device_id(), 2);
    auto moved = std::move(lease);
    EXPECT_FALSE(lease);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_EQ(moved.get(), token);
  }
  EXPECT_EQ(pool.Get(2).get(), token);
  EXPECT_EQ(backend.created(), 1u);
}

TYPED_TEST(UniqueLease, ReleaseHandsTheEventOverAndTheLeaseReturnsNothing) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  HostBackend::Event event;
  {
    auto lease = pool.Lease(0);
    event = lease.release();
    EXPECT_FALSE(lease);
  }
  EXPECT_TRUE(event);
  EXPECT_EQ(pool.node_count(), 0u);
}

TYPED_TEST(UniqueLease, OutlivingItsPoolIsSafeAndNothingLeaks) {
  HostBackend backend(1);
  std::optional<typename TestFixture::Pool> pool(std::in_place, backend);
  pool->Reserve(0, 2);
  auto lease = pool->Lease(0);
  pool.reset();  // the idle event is destroyed at once; the core lives on
  EXPECT_EQ(backend.destroyed(), 1u);
  EXPECT_TRUE(lease);
  lease.reset();  // the pool is gone: the event is retired, and the core's end deferred
  EXPECT_EQ(backend.destroyed(), 1u) << "a lease's end destroys nothing";
  run_deferred_work();
  EXPECT_EQ(backend.created(), 2u);
  EXPECT_EQ(backend.destroyed(), 2u);
}

TYPED_TEST(SharedLease, CopiesShareOneEventThatReturnsWithTheLastCopy) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  HostBackend::handle_type token = 0;
  {
    auto first = pool.LeaseShared(1);
    token = first.get();
    EXPECT_EQ(first.device_id(), 1);
    auto second = first;
    EXPECT_EQ(second.get(), token);
    first.reset();
    EXPECT_EQ(second.get(), token);
    EXPECT_EQ(pool.Get(1).get() == token, false) << "still leased by the second copy";
  }
  // The event went straight back into the pool (this thread's cache, or its node on the stack).
  EXPECT_EQ(pool.Get(1).get(), token);
}

TYPED_TEST(SharedLease, ReusesPooledEventsAndKeepsThemInTheirNodes) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  pool.Reserve(0, 1);
  const std::size_t nodes = pool.node_count();
  {
    auto lease = pool.LeaseShared(0);
    EXPECT_EQ(backend.created(), 1u);
    EXPECT_EQ(pool.node_count(), nodes) << "no node and no control block allocated";
  }
  EXPECT_EQ(pool.node_count(), nodes);
}

TYPED_TEST(SharedLease, OutlivingItsPoolIsSafeAndNothingLeaks) {
  HostBackend backend(1);
  std::optional<typename TestFixture::Pool> pool(std::in_place, backend);
  auto lease = pool->LeaseShared(0);
  auto copy = lease;
  pool.reset();
  EXPECT_EQ(backend.destroyed(), 0u);
  lease.reset();
  copy.reset();
  EXPECT_EQ(backend.destroyed(), 0u) << "a lease's end destroys nothing";
  run_deferred_work();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// The same on the inlined way: the thread's cache holds a spare block and a loaded magazine when
// the last lease begins and ends, so both ends count the lease in the cache (one owner section
// each way). The pool's core must outlive the lease alive at its destruction, and end with it:
// its end deferred by the last lease, run by the next deferred work. Fails if either end skips
// the cache's lease count (the core dies early, or never).
TYPED_TEST(SharedLease, OnTheInlinedWayTheCoreLivesExactlyAsLongAsTheLastLease) {
  using Pool = BasicHandlePool<test::TrackedBackend, TypeParam>;
  HostBackend backend(1);
  test::TrackedBackend tracked(backend);
  const std::weak_ptr<const int> core = tracked.watch();
  std::optional<Pool> pool(std::in_place, std::move(tracked));
  for (int warm = 0; warm < 3; ++warm) {
    auto lease = pool->LeaseShared(0);
    auto copy = lease;
  }
  auto last = pool->LeaseShared(0);
  pool.reset();
  EXPECT_FALSE(core.expired()) << "a lease is alive: the core must live on";
  last.reset();
  EXPECT_EQ(backend.destroyed(), 0u) << "a lease's end destroys nothing";
  run_deferred_work();
  EXPECT_TRUE(core.expired()) << "the last lease must end the core";
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TYPED_TEST(SharedLease, CopiesDroppedOnManyThreadsReturnTheEventExactlyOnce) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  for (int round = 0; round < 200; ++round) {
    std::vector<typename TestFixture::Pool::shared_lease> copies(8, pool.LeaseShared(0));
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (auto &copy : copies)
      threads.emplace_back([&ready, lease = std::move(copy)]() mutable {
        ready.fetch_add(1);
        while (ready.load() < 8) std::this_thread::yield();
        lease.reset();
      });
    for (auto &thread : threads) thread.join();
  }
  EXPECT_EQ(backend.created(), 1u) << "every round got the event the previous one returned";
  pool.Purge();
  EXPECT_EQ(backend.destroyed(), 1u);
}

TYPED_TEST(SharedLease, AFailedCreateLeavesThePoolConsistent) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  backend.inject_create_fault([](std::uint64_t, int) { return true; });
  EXPECT_THROW(pool.LeaseShared(0), HostBackendFault);
  EXPECT_THROW(pool.LeaseShared(3), std::out_of_range);
  backend.inject_create_fault({});
  EXPECT_TRUE(pool.LeaseShared(0));
}

}  // namespace
}  // namespace evpool
