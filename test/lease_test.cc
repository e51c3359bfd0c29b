// Unique and shared leases, through HostBackend.
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Pool = BasicEventPool<HostBackend>;

TEST(UniqueLease, ReturnsItsEventUnderItsOwnDeviceWhenItDies) {
  HostBackend backend(3);
  Pool pool(backend);
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

TEST(UniqueLease, ReleaseHandsTheEventOverAndTheLeaseReturnsNothing) {
  HostBackend backend(1);
  Pool pool(backend);
  HostBackend::Event event;
  {
    auto lease = pool.Lease(0);
    event = lease.release();
    EXPECT_FALSE(lease);
  }
  EXPECT_TRUE(event);
  EXPECT_EQ(pool.node_count(), 0u);
}

TEST(UniqueLease, OutlivingItsPoolIsSafeAndNothingLeaks) {
  HostBackend backend(1);
  std::optional<Pool> pool(std::in_place, backend);
  pool->Reserve(0, 2);
  auto lease = pool->Lease(0);
  pool.reset();                    // the core lives on for the lease
  EXPECT_EQ(backend.destroyed(), 0u);
  lease.reset();                   // the event goes back, then the core dies with its idle events
  EXPECT_EQ(backend.created(), 2u);
  EXPECT_EQ(backend.destroyed(), 2u);
}

TEST(SharedLease, CopiesShareOneEventThatReturnsWithTheLastCopy) {
  HostBackend backend(2);
  Pool pool(backend);
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
  // The event went straight back into its node on the event stack.
  EXPECT_EQ(pool.Get(1).get(), token);
}

TEST(SharedLease, ReusesPooledEventsAndKeepsThemInTheirNodes) {
  HostBackend backend(1);
  Pool pool(backend);
  pool.Reserve(0, 1);
  const std::size_t nodes = pool.node_count();
  {
    auto lease = pool.LeaseShared(0);
    EXPECT_EQ(backend.created(), 1u);
    EXPECT_EQ(pool.node_count(), nodes) << "no node and no control block allocated";
  }
  EXPECT_EQ(pool.node_count(), nodes);
}

TEST(SharedLease, OutlivingItsPoolIsSafeAndNothingLeaks) {
  HostBackend backend(1);
  std::optional<Pool> pool(std::in_place, backend);
  auto lease = pool->LeaseShared(0);
  auto copy = lease;
  pool.reset();
  EXPECT_EQ(backend.destroyed(), 0u);
  lease.reset();
  copy.reset();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TEST(SharedLease, CopiesDroppedOnManyThreadsReturnTheEventExactlyOnce) {
  HostBackend backend(1);
  Pool pool(backend);
  for (int round = 0; round < 200; ++round) {
    std::vector<Pool::shared_lease> copies(8, pool.LeaseShared(0));
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

TEST(SharedLease, AFailedCreateLeavesThePoolConsistent) {
  HostBackend backend(1);
  Pool pool(backend);
  backend.inject_create_fault([](std::uint64_t, int) { return true; });
  EXPECT_THROW(pool.LeaseShared(0), HostBackendFault);
  EXPECT_THROW(pool.LeaseShared(3), std::out_of_range);
  backend.inject_create_fault({});
  EXPECT_TRUE(pool.LeaseShared(0));
}

}  // namespace
}  // namespace evpool
