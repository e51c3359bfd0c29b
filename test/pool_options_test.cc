// Reserve, Trim and the idle limit, through HostBackend, with per-thread caches on and off.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/hooked_atomic.h"
#include "support/idle_events.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Token = HostBackend::handle_type;
using test::BothPolicies;
using test::kCached;
using test::kPerThreadCacheBound;
using test::PolicyName;

template <class Policy>
using PoolOptions = test::HostPoolTest<Policy>;
TYPED_TEST_SUITE(PoolOptions, BothPolicies, PolicyName);

TYPED_TEST(PoolOptions, ReserveCreatesEventsSoThatTheFirstGetsHit) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  pool.Reserve(1, 5);
  EXPECT_EQ(backend.created(), 5u);
  std::vector<Event> got;
  for (int i = 0; i < 5; ++i) got.push_back(pool.Get(1));
  EXPECT_EQ(backend.created(), 5u);
  got.push_back(pool.Get(1));
  EXPECT_EQ(backend.created(), 6u);
  EXPECT_THROW(pool.Reserve(2, 1), std::out_of_range);
}

TYPED_TEST(PoolOptions, ReservedEventsHitOnEveryThreadNotOnlyTheReservers) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  pool.Put(pool.Get(0));         // the reserving thread has a cache of its own
  constexpr int kReserved = 40;  // more than one magazine
  pool.Reserve(0, kReserved);
  const std::uint64_t created = backend.created();
  std::vector<Event> got;
  std::thread other([&] {
    for (int i = 0; i < kReserved; ++i) got.push_back(pool.Get(0));
  });
  other.join();
  EXPECT_EQ(backend.created(), created) << "the other thread's first Gets must hit";
  for (Event &event : got) pool.Put(std::move(event));
}

TYPED_TEST(PoolOptions, ReserveStopsAtTheFirstFailedCreateAndKeepsWhatItMade) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  backend.inject_create_fault([](std::uint64_t attempt, int) { return attempt == 3; });
  EXPECT_THROW(pool.Reserve(0, 5), HostBackendFault);
  std::vector<Event> got;
  for (int i = 0; i < 2; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 2u);
}

// A request over the idle limit itself would create events only to destroy them: it is refused
// before anything is created.
TYPED_TEST(PoolOptions, ReserveOverTheIdleLimitIsRefusedAndCreatesNothing) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/8);
  try {
    pool.Reserve(0, 100000);
    ADD_FAILURE() << "Reserve(0, 100000) under an idle limit of 8 was accepted";
  } catch (const std::invalid_argument &error) {
    EXPECT_NE(std::string(error.what()).find("Reserve of 100000 events on device 0, over the pool's idle limit of 8"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(backend.created(), 0u);
  pool.Reserve(0, 8);  // exactly the limit is fine
  EXPECT_EQ(backend.created(), 8u);
  EXPECT_EQ(backend.destroyed(), 0u);
}

// Where the depot already holds some, Reserve creates only what still fits, and destroys none.
TYPED_TEST(PoolOptions, ReserveStopsWhereTheDepotIsFull) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/8);
  pool.Reserve(0, 5);
  pool.Reserve(0, 8);
  EXPECT_EQ(backend.created(), 8u) << "the second Reserve must stop at the limit";
  EXPECT_EQ(backend.destroyed(), 0u) << "Reserve created events only to destroy them";
  pool.Purge();
  EXPECT_EQ(backend.destroyed(), 8u);
}

// Purge keeps every cache requested until it has trimmed the depots: a cache reopened before that
// could take a magazine of events that were idle when the Purge began out of the depot, beyond the
// Purge's reach. A thread whose cache is registered but empty Gets once inside the Purge, while it
// detaches the depot's filled stack (support/hooked_atomic.h): its cache must still be bypassed,
// so it takes one event and leaves none idle in its cache.
TEST(PurgeOrder, ACacheIsNotReopenedBeforeTheDepotsAreTrimmed) {
  HostBackend backend(1);
  BasicHandlePool<HostBackend, testing_support::HookedAtomicPolicy> pool(backend);
  constexpr int kIdle = 6;
  std::atomic<int> step{0};  // 1: filled and flushed; 2: may Get; 3: got; 4: may exit
  Event got;
  std::thread thread([&] {
    testing_support::fill(pool, 0, kIdle);
    pool.FlushThreadCache();  // its cache stays registered, holding nothing
    step.store(1);
    while (step.load() != 2) std::this_thread::yield();
    got = pool.Get(0);
    step.store(3);
    while (step.load() != 4) std::this_thread::yield();
  });
  while (step.load() != 1) std::this_thread::yield();
  testing_support::at_next_wide_load = [&] {
    step.store(2);
    while (step.load() != 3) std::this_thread::yield();
  };
  pool.Purge();
  ASSERT_EQ(step.load(), 3) << "the hook never ran inside the Purge";
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_EQ(figures.idle_in_caches, 0u) << "a cache took events the Purge should have destroyed";
  EXPECT_EQ(figures.idle, 0u);
  step.store(4);
  thread.join();
  pool.Put(std::move(got));
}

TYPED_TEST(PoolOptions, TrimKeepsKIdleEventsOfEachDevice) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  std::vector<Event> events;
  for (int i = 0; i < 6; ++i) events.push_back(pool.Get(i % 2));
  std::vector<Token> tokens;
  for (Event &event : events) {
    tokens.push_back(event.get());
    pool.Put(std::move(event));
  }
  pool.Trim(2);
  // One of the three of each device. With caches the events were in this thread's cache; an
  // unlimited depot takes them all, and then keeps exactly 2 of each device.
  EXPECT_EQ(backend.destroyed(), 2u);
  if constexpr (!kCached<TypeParam>) {
    // Device 0 had tokens[0], [2], [4] put in that order: [4] and [2] remain, newest first.
    EXPECT_EQ(pool.Get(0).release(), tokens[4]);
    EXPECT_EQ(pool.Get(0).release(), tokens[2]);
    EXPECT_EQ(pool.Get(1).release(), tokens[5]);
    EXPECT_EQ(pool.Get(1).release(), tokens[3]);
  } else {
    // Which two survive is not specified; they are two distinct ones put on that device.
    for (int device : {0, 1}) {
      const std::set<Token> put{tokens[device], tokens[device + 2], tokens[device + 4]};
      const Token first = pool.Get(device).release(), second = pool.Get(device).release();
      EXPECT_NE(first, second);
      EXPECT_TRUE(put.count(first) == 1 && put.count(second) == 1) << "device " << device;
    }
  }
  EXPECT_EQ(backend.created(), 6u);
  Event fresh = pool.Get(0);  // nothing more was kept
  EXPECT_EQ(backend.created(), 7u);
}

// Put never destroys (Put may run where CUDA forbids CUDA calls): what is over the limit is
// retired, and a later Trim or Purge destroys it.
TYPED_TEST(PoolOptions, PutBeyondTheIdleLimitRetiresTheEventForTrimToDestroy) {
  HostBackend backend(2);
  constexpr std::size_t kLimit = 3;
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, kLimit);
  EXPECT_EQ(pool.max_idle_per_device(), kLimit);
  if constexpr (!kCached<TypeParam>) {
    std::vector<Event> events;
    for (int i = 0; i < 5; ++i) events.push_back(pool.Get(0));
    for (Event &event : events) pool.Put(std::move(event));
    EXPECT_EQ(backend.destroyed(), 0u);
    EXPECT_EQ(pool.stats().devices[0].retired, 2u);
    EXPECT_EQ(pool.stats().devices[0].idle, kLimit);
    // The limit is per device, and Gets make room again.
    Event other = pool.Get(1);
    pool.Put(std::move(other));
    EXPECT_EQ(backend.destroyed(), 0u) << "a Get of device 1 destroys none of device 0's";
    Event taken = pool.Get(0);  // destroys no retired event: no window has shown them surplus yet
    pool.Put(std::move(taken));
    EXPECT_EQ(backend.destroyed(), 0u);
    EXPECT_EQ(pool.stats().devices[0].retired, 2u);
    pool.Trim(1);  // the 2 retired and 2 of the idle
    EXPECT_EQ(backend.destroyed(), 4u);
    const std::uint64_t created = backend.created();
    pool.Reserve(0, 3);  // 2 more fit beside the one kept: only those are created
    EXPECT_EQ(backend.created(), created + 2);
    EXPECT_EQ(backend.destroyed(), 4u);
  } else {
    // With caches the bound is kLimit in the depot plus two magazines in this thread's cache.
    constexpr std::size_t kBound = kLimit + kPerThreadCacheBound<TypeParam>;
    constexpr std::size_t kPut = kBound + 40;
    std::vector<Event> events;
    for (std::size_t i = 0; i < kPut; ++i) events.push_back(pool.Get(0));
    for (Event &event : events) pool.Put(std::move(event));
    EXPECT_EQ(backend.destroyed(), 0u) << "Put destroys nothing";
    const std::uint64_t retired = pool.stats().devices[0].retired;
    const std::uint64_t idle = backend.created() - retired;
    EXPECT_LE(idle, kBound) << "device 0 holds more idle events than limit + 2 x cache_capacity";
    EXPECT_GE(retired, kPut - kBound);
    // The limit is per device; a Get and a Put that the cache absorbs retire nothing.
    const std::uint64_t destroyed = backend.destroyed();
    Event other = pool.Get(1);
    pool.Put(std::move(other));
    Event taken = pool.Get(0);
    pool.Put(std::move(taken));
    EXPECT_EQ(backend.destroyed(), destroyed);
    EXPECT_EQ(backend.created(), kPut + 1) << "the Get of device 0 hit the cache";
    EXPECT_EQ(pool.stats().devices[0].retired, retired);
    // Trim(1): at most one idle event per device survives, wherever it was.
    pool.Trim(1);
    const std::uint64_t after_trim = backend.destroyed();
    EXPECT_LE(backend.created() - after_trim, 2u);
    pool.Purge();
    EXPECT_EQ(backend.created(), backend.destroyed());
    // Reserve goes to the depot, which never holds more than the limit.
    pool.Reserve(0, kLimit);
    EXPECT_EQ(backend.created(), kPut + 1 + kLimit);
    EXPECT_LE(backend.created() - backend.destroyed(), kLimit);
  }
  // What fits under the limit is kept, and the first Gets after it hit.
  pool.Purge();
  pool.Reserve(0, kLimit);
  const std::uint64_t created = backend.created();
  std::vector<Event> got;
  for (std::size_t i = 0; i < kLimit; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), created);
}

TYPED_TEST(PoolOptions, AnIdleLimitOfZeroIsRejected) {
  HostBackend backend(1);
  using Pool = typename TestFixture::Pool;
  EXPECT_THROW(Pool(backend, HostBackend::kDefaultOptions, 0), std::invalid_argument);
}

TYPED_TEST(PoolOptions, TheIdleLimitHoldsUnderConcurrency) {
  HostBackend backend(1);
  constexpr std::size_t kLimit = 4;
  typename TestFixture::Pool pool(backend, HostBackend::kDefaultOptions, kLimit);
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
  // The threads have exited, so their caches went to the depot, which respects the limit; what
  // went over it is retired, each retired magazine on a node of its own.
  const std::uint64_t destroyed_before = backend.destroyed();
  const std::uint64_t retired = pool.retired_handles(0);
  pool.Purge();
  EXPECT_LE(backend.destroyed() - destroyed_before - retired, kLimit) << "more idle events than the limit";
  EXPECT_EQ(backend.created(), backend.destroyed());
  // Every node holds idle or retired events (at most every event created), or is in a thread's
  // hands: without caches one (popped by a Get, not yet on the spare list when a Put allocates
  // another), with caches three (loaded, previous, and one being traded or a Trim's spare).
  const std::size_t in_hands = (kCached<TypeParam> ? 3 : 1) * threads.size();
  EXPECT_LE(pool.node_count(), kLimit + backend.created() + in_hands);
}

}  // namespace
}  // namespace evpool
