// stats(): every figure against what the test did and what the backend counted, with per-thread
// caches on and off. Some figures are derived from others (pool_stats.h), so each is checked
// against evidence from outside the pool (the backend's own counts, the events the test holds, and
// Gets that must hit or must create), never only against the other figures.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/depot_stripes.h"
#include "support/hooked_atomic.h"
#include "support/idle_events.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using test::BothPolicies;
using test::PolicyName;

template <class Policy>
using PoolStatsTest = test::HostPoolTest<Policy>;
TYPED_TEST_SUITE(PoolStatsTest, BothPolicies, PolicyName);

// How many events the pool really held idle on `device`; puts them back (and the one created).
template <class Pool>
std::uint64_t count_idle_from_outside(Pool &pool, HostBackend &backend, int device) {
  std::vector<Event> got = testing_support::get_until_a_miss(pool, backend, device);
  for (Event &event : got) pool.Put(std::move(event));
  return got.size() - 1;
}

TYPED_TEST(PoolStatsTest, OneThreadsCallsAreCountedExactly) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  pool.Reserve(1, 5);
  std::vector<Event> got;
  for (int i = 0; i < 8; ++i) got.push_back(pool.Get(1));  // 5 hits, then 3 misses
  for (int i = 0; i < 6; ++i) {                            // under the recorded device, named or not
    pool.Put(std::move(got.back()), i % 2 == 0 ? 1 : -1);
    got.pop_back();
  }
  HostBackend outsider(2);
  pool.Put(outsider.adopt(outsider.create(0, 1), -1), 1);  // a bare token: adopted
  outsider.set_current_device(1);
  pool.Put(outsider.adopt(outsider.create(0, 1), -1));  // adopted, under the current device
  outsider.set_current_device(0);

  const PoolStats stats = pool.stats();
  ASSERT_EQ(stats.devices.size(), 2u);
  const DeviceStats &figures = stats.devices[1];
  EXPECT_EQ(figures.created, 8u);
  EXPECT_EQ(figures.destroyed, 0u);
  EXPECT_EQ(figures.gets, 8u);
  EXPECT_EQ(figures.gets_hit, 5u);
  EXPECT_EQ(figures.gets_missed, 3u);
  EXPECT_EQ(figures.puts, 6u);
  EXPECT_EQ(figures.puts_adopted, 2u);
  EXPECT_EQ(figures.outstanding, 2);
  EXPECT_EQ(figures.idle, 8u);
  EXPECT_EQ(figures.outstanding_peak_bound, 10u) << "8 created at most, plus 2 adopted";
  if (test::caches_on<TypeParam>()) {
    EXPECT_EQ(figures.idle_in_caches, 8u) << "Puts go to the calling thread's cache";
  } else {
    EXPECT_EQ(figures.idle_in_depot, 8u);
  }
  EXPECT_EQ(stats.devices[0].gets + stats.devices[0].created + stats.devices[0].idle, 0u);
  EXPECT_EQ(stats.total().gets, 8u);
  for (Event &event : got) pool.Put(std::move(event));
}

TYPED_TEST(PoolStatsTest, PurgeAndTheIdleLimitCountWhatTheyDestroy) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/10);
  std::vector<Event> got;
  for (int i = 0; i < 200; ++i) got.push_back(pool.Get(0));
  for (Event &event : got) pool.Put(std::move(event));
  DeviceStats figures = pool.stats().devices[0];
  EXPECT_EQ(figures.destroyed, backend.destroyed());
  EXPECT_EQ(figures.destroyed, 0u) << "Put destroys nothing";
  EXPECT_GT(figures.retired, 0u) << "the idle limit retired some";
  EXPECT_EQ(figures.retired + figures.idle, backend.created() - backend.destroyed());
  EXPECT_EQ(figures.outstanding, 0);
  const std::uint64_t found = count_idle_from_outside(pool, backend, 0);
  EXPECT_EQ(found + backend.destroyed(), figures.idle + figures.retired)
      << "a Get that finds no idle event hands a retired one out again before it creates one, "
         "and a Get that refills its cache destroys a few";
  pool.Trim(kUnlimitedIdle);
  figures = pool.stats().devices[0];
  EXPECT_EQ(figures.retired, 0u) << "Trim destroys every retired event";
  EXPECT_EQ(figures.destroyed + figures.idle, figures.created) << "and only those: nothing is out";

  pool.Purge();
  figures = pool.stats().devices[0];
  EXPECT_EQ(figures.idle, 0u);
  EXPECT_EQ(figures.created, backend.created());
  EXPECT_EQ(figures.destroyed, backend.destroyed());
  EXPECT_EQ(figures.destroyed, figures.created) << "nothing is outstanding";
}

// The depot's idle count without a limit is kept per stripe (depot.h): a magazine may be counted
// into one stripe and out of another, so single stripes go below zero and only their sum is the
// depot's. Here the stripes end at -5 and 8 (the default policy's 8 stripes; one without caches).
TYPED_TEST(PoolStatsTest, TheDepotsIdleIsTheSumOverItsStripes) {
  testing_support::restart_depot_stripe_hints();  // this thread's home stripe 0, the next 1
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  testing_support::fill(pool, 0, 5);
  pool.FlushThreadCache();  // 5 counted into stripe 0
  // A thread takes the 5 (counted out of stripe 0); its exit flushes 8 into stripe 1.
  std::thread([&] { testing_support::fill(pool, 0, 8); }).join();
  pool.Trim(3);  // destroys 5, counted out of this thread's stripe 0
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_EQ(figures.idle_in_depot, 3u);
  EXPECT_EQ(figures.idle, count_idle_from_outside(pool, backend, 0));
  EXPECT_EQ(figures.created - figures.destroyed, 3u);
}

TYPED_TEST(PoolStatsTest, LeasesCountAsGetsAndPuts) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  {
    auto unique = pool.Lease(0);
    auto shared = pool.LeaseShared(0);
    const DeviceStats figures = pool.stats().devices[0];
    EXPECT_EQ(figures.gets, 2u);
    EXPECT_EQ(figures.outstanding, 2);
  }
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_EQ(figures.puts, 2u);
  EXPECT_EQ(figures.outstanding, 0);
  EXPECT_EQ(figures.idle, 2u);
}

// Magazines rotate through the cache's two slots and the depot (refills, full magazines handed
// over, a flush, a Trim that swaps the cache's magazines for empty ones): the Gets counted in the
// slots must move with them. One event per magazine or two make every call rotate.
template <class Policy>
void expect_gets_survive_rotation() {
  HostBackend backend(1);
  BasicHandlePool<HostBackend, Policy> pool(backend);
  pool.Reserve(0, 256);
  std::uint64_t gets = 0, puts = 0;
  const auto expect_counted = [&](const char *after) {
    const DeviceStats figures = pool.stats().devices[0];
    EXPECT_EQ(figures.gets, gets) << "after " << after << ", capacity " << Policy::cache_capacity;
    EXPECT_EQ(figures.puts, puts) << "after " << after << ", capacity " << Policy::cache_capacity;
  };
  std::vector<Event> got;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 256; ++i, ++gets) got.push_back(pool.Get(0));
    expect_counted("Gets");
    for (Event &event : got) pool.Put(std::move(event)), ++puts;
    got.clear();
    expect_counted("Puts");
  }
  Event held = pool.Get(0);
  ++gets;
  pool.FlushThreadCache();
  pool.Put(std::move(held));  // loads an empty magazine into a slot that gave its own up
  ++puts;
  expect_counted("FlushThreadCache");
  for (int i = 0; i < 40; ++i, ++gets) got.push_back(pool.Get(0));
  for (Event &event : got) pool.Put(std::move(event)), ++puts;
  got.clear();
  pool.Trim(10);
  expect_counted("Trim(10)");
}

TEST(PoolStatsRotation, TheGetsCountedInSlotsMoveWithTheirMagazines) {
  expect_gets_survive_rotation<DefaultPoolPolicy>();
  expect_gets_survive_rotation<FixedMagazinePolicy<2>>();
  expect_gets_survive_rotation<FixedMagazinePolicy<1>>();
}

// Threads that are alive but idle still have counts and events in their caches: stats() reads
// them without the threads' help.
TYPED_TEST(PoolStatsTest, ReadsTheCachesOfThreadsThatAreAliveButIdle) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  constexpr int kThreads = 4, kHeld = 20;
  std::atomic<int> ready{0};
  std::atomic<bool> finish{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      std::vector<Event> got;
      for (int i = 0; i < kHeld; ++i) got.push_back(pool.Get(0));
      for (Event &event : got) pool.Put(std::move(event));
      ready.fetch_add(1);
      while (!finish.load()) std::this_thread::yield();
    });
  while (ready.load() < kThreads) std::this_thread::yield();
  const DeviceStats figures = pool.stats().devices[0];
  finish.store(true);
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(figures.gets, std::uint64_t{kThreads * kHeld});
  EXPECT_EQ(figures.puts, std::uint64_t{kThreads * kHeld});
  EXPECT_EQ(figures.idle, backend.created()) << "every event created is back";
  if (test::caches_on<TypeParam>()) {  // each thread's events stay in its own cache
    EXPECT_EQ(figures.idle_in_caches, std::uint64_t{kThreads * kHeld});
  } else {  // no caches (none in the policy, or checked): every Put went to the depot
    EXPECT_EQ(figures.idle_in_depot, backend.created());
    EXPECT_EQ(figures.idle_in_caches, 0u);
  }
}

// A thread that exits leaves its cache to be collected, and the Gets it counted in the cache's
// slots must then be folded into the pool's shared counters: the first stats() still reads the
// abandoned cache in the registry and collects it at its end; the second finds it gone.
TYPED_TEST(PoolStatsTest, AnExitedThreadsGetsStayCountedOnceItsCacheIsCollected) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  constexpr int kGets = 5;
  std::thread([&] {
    for (int i = 0; i < kGets; ++i) pool.Put(pool.Get(0));
  }).join();
  EXPECT_EQ(pool.stats().devices[0].gets, std::uint64_t{kGets}) << "before the collection";
  EXPECT_EQ(pool.stats().devices[0].gets, std::uint64_t{kGets}) << "after the collection";
}

// A thread that exits while stats() holds its cache skips its exit flush (the cache is
// requested): its events stay in the abandoned cache until someone collects it. stats() does, at
// its end, so that they reach the depot where other threads find them. The exit is made to happen
// inside stats(), after it has requested every cache (support/hooked_atomic.h).
TEST(PoolStatsCollection, AThreadExitingDuringStatsHasItsEventsMovedToTheDepotByIt) {
  HostBackend backend(1);
  BasicHandlePool<HostBackend, testing_support::HookedAtomicPolicy> pool(backend);
  constexpr int kHeld = 6;
  std::atomic<bool> filled{false}, may_exit{false};
  std::thread thread([&] {
    std::vector<Event> got;
    for (int i = 0; i < kHeld; ++i) got.push_back(pool.Get(0));
    for (Event &event : got) pool.Put(std::move(event));  // kHeld idle in this thread's cache
    filled.store(true);
    while (!may_exit.load()) std::this_thread::yield();
  });
  while (!filled.load()) std::this_thread::yield();
  testing_support::at_next_wide_load = [&] {  // inside stats(), every cache requested: the exit skips its flush
    may_exit.store(true);
    thread.join();
  };
  const DeviceStats during = pool.stats().devices[0];
  ASSERT_FALSE(thread.joinable()) << "the hook never ran inside stats()";
  EXPECT_EQ(during.idle, std::uint64_t{kHeld});
  const DeviceStats after = pool.stats().devices[0];
  EXPECT_EQ(after.idle_in_depot, std::uint64_t{kHeld}) << "the exited thread's events were not collected";
  EXPECT_EQ(after.idle_in_caches, 0u);
}

// Many threads, random Gets, Puts, adopted Puts and Purges, under an idle limit; once they have
// exited, every figure matches the backend, the events the test still holds, and the events the
// pool really hands out without creating.
TYPED_TEST(PoolStatsTest, ExactOnceThreadsStopAfterAStorm) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/100);
  HostBackend outsider(2);
  constexpr int kThreads = 6, kSteps = 20'000;
  std::atomic<std::int64_t> outstanding{0}, peak{0};
  std::atomic<std::uint64_t> adopted{0}, gets{0}, puts{0};
  std::vector<std::vector<Event>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      std::vector<Event> &held = kept[static_cast<std::size_t>(t)];
      for (int step = 0; step < kSteps; ++step) {
        const int device = static_cast<int>(random() % 2);
        const unsigned choice = random() % 100;
        if (choice < 50 || held.empty()) {
          held.push_back(pool.Get(device));
          gets.fetch_add(1);
          const std::int64_t now = outstanding.fetch_add(1) + 1;
          for (std::int64_t seen = peak.load(); now > seen && !peak.compare_exchange_weak(seen, now);) {
          }
        } else if (choice < 98) {
          // Before the Put: once it is back, a Purge may destroy it and a Get create another, and
          // this count, still holding it, would pass the pool's.
          outstanding.fetch_sub(1);
          pool.Put(std::move(held.back()));
          held.pop_back();
          puts.fetch_add(1);
        } else if (choice < 99) {
          pool.Put(outsider.adopt(outsider.create(0, device), -1), device);
          adopted.fetch_add(1);
        } else {
          pool.Purge();
        }
      }
    });
  for (std::thread &thread : threads) thread.join();

  const PoolStats stats = pool.stats();
  const DeviceStats total = stats.total();
  EXPECT_EQ(total.created, backend.created());
  // The pool destroys through its backend, or through an event's own (an adopted one's is the
  // outsider's); the outsider itself destroys nothing.
  EXPECT_EQ(total.destroyed, backend.destroyed() + outsider.destroyed());
  EXPECT_EQ(total.gets, gets.load());
  EXPECT_EQ(total.puts, puts.load());
  EXPECT_EQ(total.puts_adopted, adopted.load());
  EXPECT_EQ(total.outstanding, outstanding.load());
  EXPECT_GE(static_cast<std::int64_t>(total.outstanding_peak_bound), peak.load());
  for (int device = 0; device < 2; ++device) {
    EXPECT_EQ(stats.devices[static_cast<std::size_t>(device)].idle, count_idle_from_outside(pool, backend, device))
        << "device " << device;
  }
  for (std::vector<Event> &held : kept)
    for (Event &event : held) pool.Put(std::move(event));
}

}  // namespace
}  // namespace evpool
