// Reserve, Trim and the idle limit, through HostBackend.
#include <gtest/gtest.h>

#include <climits>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Pool = BasicEventPool<HostBackend>;
using Event = HostBackend::Event;

TEST(PoolOptions, ReserveCreatesEventsSoThatTheFirstGetsHit) {
  HostBackend backend(2);
  Pool pool(backend);
  pool.Reserve(1, 5);
  EXPECT_EQ(backend.created(), 5u);
  std::vector<Event> got;
  for (int i = 0; i < 5; ++i) got.push_back(pool.Get(1));
  EXPECT_EQ(backend.created(), 5u);
  got.push_back(pool.Get(1));
  EXPECT_EQ(backend.created(), 6u);
  EXPECT_THROW(pool.Reserve(2, 1), std::out_of_range);
}

TEST(PoolOptions, ReserveStopsAtTheFirstFailedCreateAndKeepsWhatItMade) {
  HostBackend backend(1);
  Pool pool(backend);
  backend.inject_create_fault([](std::uint64_t attempt, int) { return attempt == 3; });
  EXPECT_THROW(pool.Reserve(0, 5), HostBackendFault);
  std::vector<Event> got;
  for (int i = 0; i < 2; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 2u);
}

TEST(PoolOptions, TrimKeepsTheMostRecentlyPutEventsOfEachDevice) {
  HostBackend backend(2);
  Pool pool(backend);
  std::vector<Event> events;
  for (int i = 0; i < 6; ++i) events.push_back(pool.Get(i % 2));
  std::vector<HostBackend::handle_type> tokens;
  for (Event &event : events) {
    tokens.push_back(event.get());
    pool.Put(std::move(event));
  }
  pool.Trim(2);
  EXPECT_EQ(backend.destroyed(), 2u);  // one of the three of each device
  // Device 0 had tokens[0], [2], [4] put in that order: [4] and [2] remain, newest first.
  EXPECT_EQ(pool.Get(0).release(), tokens[4]);
  EXPECT_EQ(pool.Get(0).release(), tokens[2]);
  EXPECT_EQ(pool.Get(1).release(), tokens[5]);
  EXPECT_EQ(pool.Get(1).release(), tokens[3]);
  EXPECT_EQ(backend.created(), 6u);
}

TEST(PoolOptions, PutBeyondTheIdleLimitDestroysTheEvent) {
  HostBackend backend(2);
  Pool pool(backend, HostBackend::kDefaultFlags, 3);
  EXPECT_EQ(pool.max_idle_per_device(), 3u);
  std::vector<Event> events;
  for (int i = 0; i < 5; ++i) events.push_back(pool.Get(0));
  for (Event &event : events) pool.Put(std::move(event));
  EXPECT_EQ(backend.destroyed(), 2u);
  EXPECT_EQ(pool.node_count(), 3u);
  // The limit is per device, and Gets make room again.
  Event other = pool.Get(1);
  pool.Put(std::move(other));
  EXPECT_EQ(backend.destroyed(), 2u);
  Event taken = pool.Get(0);
  pool.Put(std::move(taken));
  EXPECT_EQ(backend.destroyed(), 2u);
  pool.Trim(1);
  EXPECT_EQ(backend.destroyed(), 4u);
  pool.Reserve(0, 5);  // 2 more fit beside the one kept
  EXPECT_EQ(backend.destroyed(), 7u);
}

TEST(PoolOptions, AnIdleLimitOfZeroIsRejected) {
  HostBackend backend(1);
  EXPECT_THROW(Pool(backend, HostBackend::kDefaultFlags, 0), std::invalid_argument);
}

TEST(PoolOptions, TheIdleLimitHoldsUnderConcurrency) {
  HostBackend backend(1);
  constexpr std::size_t kLimit = 4;
  Pool pool(backend, HostBackend::kDefaultFlags, kLimit);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        std::vector<Event> burst;
        for (int j = 0; j < 3; ++j) burst.push_back(pool.Get(0));
        for (Event &event : burst) pool.Put(std::move(event));
        if (i % 100 == 0) pool.Trim(1);
      }
    });
  for (auto &thread : threads) thread.join();
  const std::uint64_t destroyed_before = backend.destroyed();
  pool.Purge();
  EXPECT_LE(backend.destroyed() - destroyed_before, kLimit) << "more idle events than the limit";
  EXPECT_EQ(backend.created(), backend.destroyed());
  // A node popped by a Get is on no list until the Get pushes it onto the spare list, so a
  // concurrent Put may allocate another: at most one more node than the limit per thread.
  EXPECT_LE(pool.node_count(), kLimit + threads.size());
}

}  // namespace
}  // namespace evpool
