// The per-thread caches, single steps at a time through HostBackend: what a thread's exit, a
// Purge, a pool's destruction and a lease that changes threads do to the events cached for a pool,
// and calls made while a thread's thread-local objects are torn down. With caches on, off, and on
// as where membarrier is refused (test/pool_policies.h): every property below is one of the whole
// pool, and must hold each way.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/idle_events.h"
#include "tracked_backend.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Token = HostBackend::handle_type;
using test::CachePolicies;
using test::PolicyName;
using test::TrackedBackend;

// A thread that runs steps handed to it one at a time and parks in between, alive but idle.
class ParkedThread {
 public:
  ParkedThread() : thread_([this] { loop(); }) {}
  ~ParkedThread() {
    run([this] { done_ = true; });
    thread_.join();
  }
  ParkedThread(const ParkedThread &) = delete;
  ParkedThread &operator=(const ParkedThread &) = delete;

  // Runs `step` on the thread and waits for it to end.
  template <class Step>
  void run(Step step) {
    std::unique_lock lock(mutex_);
    step_ = std::move(step);
    changed_.notify_all();
    changed_.wait(lock, [this] { return !step_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!done_) {
      changed_.wait(lock, [this] { return static_cast<bool>(step_); });
      step_();
      step_ = nullptr;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> step_;
  bool done_ = false;
  std::thread thread_;
};

template <class Policy>
class ThreadCache : public testing::Test {
 protected:
  using Pool = BasicHandlePool<HostBackend, Policy>;
  using TrackedPool = BasicHandlePool<TrackedBackend, Policy>;
};
TYPED_TEST_SUITE(ThreadCache, CachePolicies, PolicyName);

// With caches, what a thread puts stays in its cache, also after a Purge has emptied and reopened
// it; without, in the depot. Fails if owner_enter never admits the owner, for instance if the
// fenced path (taken where membarrier is refused) reported every cache as held by a purger, or if
// a purger's reopening left the cache closed: each property below would still hold, through the
// depot.
TYPED_TEST(ThreadCache, AThreadsPutsStayInItsCacheBeforeAndAfterAPurge) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  const auto idle_in_caches = [&] { return pool.stats().devices[0].idle_in_caches; };
  const std::uint64_t expected = test::caches_on<TypeParam>() ? 3 : 0;
  testing_support::fill(pool, 0, 3);
  EXPECT_EQ(idle_in_caches(), expected);
  pool.Purge();
  EXPECT_EQ(idle_in_caches(), 0u);
  testing_support::fill(pool, 0, 3);
  EXPECT_EQ(idle_in_caches(), expected) << "the Purge left this thread's cache closed";
}

// Where membarrier is refused, the owner fences fully on every call: each way a cache opens (its
// creation, and the reopening after Purge, Trim and stats()) leaves it in the state that sends
// its owner through the full fence. Fails if any of them opens it as kOpen, or if the fenced path
// skips the fence.
TEST(FencedThreadCache, EveryWayACacheOpensMakesItsOwnerFenceFully) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  using Pool = BasicHandlePool<HostBackend, test::OwnersFenceFullyPolicy>;
  HostBackend backend(1);
  Pool pool(backend);
  const auto fences_in_a_get_and_a_put = [&] {  // one per call
    return test::OwnersFenceFully::fences_during([&] { pool.Put(pool.Get(0)); });
  };
  EXPECT_EQ(fences_in_a_get_and_a_put(), 2u) << "a new cache";
  pool.Purge();
  EXPECT_EQ(fences_in_a_get_and_a_put(), 2u) << "after Purge";
  pool.Trim(1);
  EXPECT_EQ(fences_in_a_get_and_a_put(), 2u) << "after Trim";
  (void)pool.stats();
  EXPECT_EQ(fences_in_a_get_and_a_put(), 2u) << "after stats()";
}

TYPED_TEST(ThreadCache, EventsCachedByAThreadThatExitedAreGotElsewhereWithoutCreating) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  // This thread's cache exists before the other thread exits (a registration after the exit
  // would collect the exited thread's cache instead of its exit).
  std::vector<Event> got;
  got.push_back(pool.Get(0));
  std::thread([&] {
    std::vector<Event> events;
    for (int i = 0; i < 10; ++i) events.push_back(pool.Get(i % 2));
    for (Event &event : events) pool.Put(std::move(event));
  }).join();
  const std::uint64_t created = backend.created();
  EXPECT_EQ(created, 11u);
  for (int i = 0; i < 10; ++i) got.push_back(pool.Get(i % 2));
  EXPECT_EQ(backend.created(), created) << "the exited thread's cached events reach the depot";
  got.clear();
  EXPECT_EQ(backend.destroyed(), created);
}

TYPED_TEST(ThreadCache, PurgeDestroysTheCachedEventsOfAParkedThread) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  ParkedThread parked;
  std::set<Token> cached;
  parked.run([&] {
    std::vector<Event> events;
    for (int i = 0; i < 20; ++i) events.push_back(pool.Get(0));
    for (Event &event : events) {
      cached.insert(event.get());
      pool.Put(std::move(event));
    }
  });
  pool.Purge();  // the parked thread is idle: its cache is emptied under its feet
  EXPECT_EQ(backend.destroyed(), 20u);
  parked.run([&] {
    Event event = pool.Get(0);
    EXPECT_EQ(cached.count(event.get()), 0u) << "a purged event came back";
    EXPECT_EQ(backend.created(), 21u);
  });
}

// A HostBackend (sharing the counters of the one it is made from) whose next destroy first runs a
// hook, once: a test can act while a Purge is inside its destroy calls.
struct HookedBackend : HostBackend {
  explicit HookedBackend(const HostBackend &counters) : HostBackend(counters) {}
  void destroy(handle_type token) noexcept {
    if (*hook) std::exchange(*hook, nullptr)();
    HostBackend::destroy(token);
  }
  std::shared_ptr<std::function<void()>> hook = std::make_shared<std::function<void()>>();
};

// Regression: Purge used to reopen each drained cache before trimming the depots, so a Get made
// meanwhile by a thread whose cache was already drained took a whole filled magazine of events
// that were idle when the Purge began out of the depot, into its cache, where they survived it.
// Here that Get runs, to its end, during the Purge's first destroy (draining this thread's cache,
// after the other thread's empty one): before the depot trim, which must then reach every event
// idle at the start of the Purge but the one the Get took.
TYPED_TEST(ThreadCache, AGetDuringPurgeLeavesNoEventThatWasIdleWhenItBeganAlive) {
  using Pool = BasicHandlePool<HookedBackend, TypeParam>;
  HostBackend backend(1);
  HookedBackend hooked(backend);
  const std::shared_ptr<std::function<void()>> hook = hooked.hook;
  Pool pool(std::move(hooked));
  ParkedThread parked;
  parked.run([&] {  // registers the first cache, then empties it: drained first, with nothing in it
    pool.Put(pool.Get(0));
    pool.FlushThreadCache();
  });
  pool.Reserve(0, 96);    // filled magazines, idle in the depot
  pool.Put(pool.Get(0));  // this thread's cache holds events: the Purge destroys them
  ASSERT_EQ(backend.destroyed(), 0u);
  Event held;
  std::uint64_t destroyed_before_get = 0;
  *hook = [&] {  // runs on this thread, inside the Purge, before its first destroy
    destroyed_before_get = backend.destroyed();
    parked.run([&] { held = pool.Get(0); });  // returns once the Get has returned
  };
  pool.Purge();
  EXPECT_FALSE(*hook) << "the Purge destroyed nothing";
  EXPECT_EQ(destroyed_before_get, 0u);
  ASSERT_TRUE(held);
  EXPECT_EQ(backend.created(), backend.destroyed() + 1)
      << "events idle when the Purge began survived it: " << backend.created() - backend.destroyed() - 1;
  held = Event();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TYPED_TEST(ThreadCache, TrimMovesAParkedThreadsCachedEventsToTheDepot) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  ParkedThread parked;
  parked.run([&] {
    std::vector<Event> events;
    for (int i = 0; i < 20; ++i) events.push_back(pool.Get(0));
    for (Event &event : events) pool.Put(std::move(event));
  });
  pool.Trim(5);
  EXPECT_EQ(backend.destroyed(), 15u);
  std::vector<Event> got;
  for (int i = 0; i < 5; ++i) got.push_back(pool.Get(0));  // from the depot, on this thread
  EXPECT_EQ(backend.created(), 20u);
}

TYPED_TEST(ThreadCache, ANewPoolNeverGetsTheCacheOfADestroyedOne) {
  HostBackend backend(1);
  std::optional<typename TestFixture::Pool> pool(std::in_place, backend);
  ParkedThread parked;
  std::set<Token> dead;
  parked.run([&] {
    std::vector<Event> events;
    for (int i = 0; i < 5; ++i) events.push_back(pool->Get(0));
    for (Event &event : events) {
      dead.insert(event.get());
      pool->Put(std::move(event));
    }
  });
  pool.reset();
  EXPECT_EQ(backend.destroyed(), 5u) << "the destructor destroys the parked thread's cached events";
  pool.emplace(backend);  // as like as not at the same address, with the same core address
  parked.run([&] {
    Event event = pool->Get(0);
    EXPECT_EQ(dead.count(event.get()), 0u) << "a new pool handed out a destroyed pool's event";
    EXPECT_EQ(backend.created(), 6u);
    pool->Put(std::move(event));
  });
  pool.reset();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TYPED_TEST(ThreadCache, ALeaseMayEndOnAnotherThreadAndAfterItsPool) {
  HostBackend backend(1);
  TrackedBackend tracked(backend);
  const std::weak_ptr<const int> core = tracked.watch();
  std::optional<typename TestFixture::TrackedPool> pool(std::in_place, std::move(tracked));
  ParkedThread other;
  // Begun here, ended there (that thread's count goes negative), and the reverse.
  auto here = pool->Lease(0);
  typename TestFixture::TrackedPool::unique_lease there;
  other.run([&] {
    there = pool->Lease(0);
    here.reset();
  });
  EXPECT_EQ(backend.created(), 2u);
  auto shared = pool->LeaseShared(0);
  other.run([&] { auto copy = shared; });
  pool->Reserve(0, 1);
  const std::uint64_t idle = backend.created() - 2;  // all but the two leased events
  pool.reset();
  EXPECT_FALSE(core.expired()) << "the core must live on for the leases";
  EXPECT_EQ(backend.destroyed(), idle) << "the idle events, and only those";
  other.run([&] { shared.reset(); });
  EXPECT_EQ(backend.destroyed(), idle) << "a lease's end destroys nothing: it retires the event";
  EXPECT_FALSE(core.expired());
  there.reset();  // the last lease, ended on the thread that did not begin it
  EXPECT_FALSE(core.expired()) << "the core's end is deferred";
  run_deferred_work();
  EXPECT_TRUE(core.expired()) << "the last lease ends the core, through the deferred work";
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TYPED_TEST(ThreadCache, FlushThreadCacheHandsTheCallersEventsToEveryThreadWithinTheLimit) {
  HostBackend backend(1);
  constexpr std::size_t kLimit = 10;
  typename TestFixture::Pool pool(backend), limited(backend, HostBackend::kDefaultOptions, kLimit);
  std::vector<Event> got;
  got.push_back(pool.Get(0));  // this thread's cache exists: no registration collects anything
  ParkedThread parked;
  parked.run([&] {
    for (auto *which : {&pool, &limited}) {
      std::vector<Event> events;
      for (int i = 0; i < 40; ++i) events.push_back(which->Get(0));
      for (Event &event : events) which->Put(std::move(event));
      which->FlushThreadCache();
    }
  });
  EXPECT_LE(backend.created() - backend.destroyed() - got.size() - limited.stats().devices[0].retired, 40 + kLimit)
      << "the flushed cache of the limited pool went to its depot, which keeps at most the limit";
  const std::uint64_t created = backend.created();
  for (int i = 0; i < 40; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), created) << "the parked thread's flushed events are in the depot";
  got.clear();
  pool.Purge();
  limited.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// A magazine the cache emptied by Gets goes back to the depot's empty stack when a third one is
// loaded; its own count was left at what it held when it entered the cache (the slot counted the
// Gets), so it must be written back as 0 on the way out. A stale count there makes the next taker
// of an empty magazine (here Reserve) file the magazine's old events as filled, and the Gets that
// follow hand out events that are already held.
TYPED_TEST(ThreadCache, AMagazineEmptiedInTheCacheReturnsToTheDepotHoldingNoEvent) {
  // Reserve fills magazines to the start capacity (one event a node without caches).
  constexpr std::size_t kPerMagazine = std::max<std::size_t>(TypeParam::cache_start_capacity, 1);
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  pool.Reserve(0, 3 * kPerMagazine);  // three filled magazines in the depot
  std::vector<Event> held;
  // The third magazine's load gives the first, emptied by Gets in the cache, back as empty.
  for (std::size_t i = 0; i < 3 * kPerMagazine; ++i) held.push_back(pool.Get(0));
  ASSERT_EQ(backend.created(), 3 * kPerMagazine) << "every Get hit a reserved event";
  pool.Reserve(0, 1);  // takes that empty magazine and fills it with one new event
  EXPECT_EQ(backend.created(), 3 * kPerMagazine + 1);
  for (std::size_t i = 0; i < kPerMagazine + 1; ++i) held.push_back(pool.Get(0));
  std::set<Token> tokens;
  for (const Event &event : held)
    EXPECT_TRUE(tokens.insert(event.get()).second) << "event " << event.get() << " handed out twice";
  EXPECT_EQ(backend.created(), held.size()) << "one new event per Get past the reserved ones";
  held.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// Calls made by a thread-local object's destructor, on a pool the thread cached events of and on
// one it never used. Constructed before the thread's first call on any pool, it is destroyed after
// the thread's caches were flushed (the calls must bypass the cache); constructed after, it is
// destroyed before the flush (the calls use the cache, and the flush takes them along).
template <class Pool>
struct LateUser {
  Pool *used = nullptr;
  Pool *unused = nullptr;
  HostBackend *backend = nullptr;
  bool *late_gets_hit = nullptr;

  ~LateUser() {
    if (used == nullptr) return;
    const std::uint64_t created = backend->created();
    std::vector<Event> events;
    for (int i = 0; i < 10; ++i) events.push_back(used->Get(0));
    {
      auto lease = used->Lease(0);
      auto shared = used->LeaseShared(0);
    }
    *late_gets_hit = backend->created() == created;
    for (Event &event : events) used->Put(std::move(event));
    unused->Put(unused->Get(0));
    auto lease = unused->Lease(0);
  }
};

TYPED_TEST(ThreadCache, ThreadLocalDestructorsWorkBeforeAndAfterTheCacheFlush) {
  for (bool constructed_first : {true, false}) {
    SCOPED_TRACE(constructed_first ? "destroyed after the flush" : "destroyed before the flush");
    HostBackend backend(1);
    typename TestFixture::Pool used(backend), unused(backend);
    bool late_gets_hit = false;
    std::thread([&] {
      auto use = [&] {
        std::vector<Event> events;
        for (int i = 0; i < 100; ++i) events.push_back(used.Get(0));
        for (Event &event : events) used.Put(std::move(event));
      };
      if (!constructed_first) use();
      thread_local LateUser<typename TestFixture::Pool> late;
      late.unused = &unused;
      late.backend = &backend;
      late.late_gets_hit = &late_gets_hit;
      late.used = &used;
      if (constructed_first) use();
    }).join();
    EXPECT_TRUE(late_gets_hit) << "the late Gets must find the thread's (flushed) events";
    // Everything the thread and its late calls put back is in the depots.
    const std::uint64_t created = backend.created();
    EXPECT_EQ(created, 101u);
    std::vector<Event> got;
    for (int i = 0; i < 100; ++i) got.push_back(used.Get(0));
    got.push_back(unused.Get(0));
    EXPECT_EQ(backend.created(), created) << "an event put back by the exiting thread is stuck";
    got.clear();
    used.Purge();
    unused.Purge();
    EXPECT_EQ(backend.created(), backend.destroyed());
  }
}

}  // namespace
}  // namespace evpool

namespace evpool {
namespace {

// A thread that uses two pools in turn finds both caches through the directory's two hints: no
// call takes the slow lookup, which would reorder the hints (thread_cache_directory.h).
TEST(ThreadCacheHints, TwoPoolsUsedInTurnStayHinted) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  BasicHandlePool<HostBackend> a(backend), b(backend);
  a.Put(a.Get(0));
  b.Put(b.Get(0));
  const detail::ThreadCacheDirectory::Entry b_hint = detail::this_thread_caches.hints[0];  // b: last
  const detail::ThreadCacheDirectory::Entry a_hint = detail::this_thread_caches.hints[1];
  ASSERT_NE(b_hint.cache, nullptr);
  ASSERT_NE(a_hint.cache, nullptr);
  // A slow lookup would put its pool first: a call on a, hinted second, must leave it second.
  const auto unchanged = [&] {
    const auto &hints = detail::this_thread_caches.hints;
    return hints[0].pool_id == b_hint.pool_id && hints[0].cache == b_hint.cache &&
           hints[1].pool_id == a_hint.pool_id && hints[1].cache == a_hint.cache;
  };
  for (int i = 0; i < 10; ++i) {
    a.Put(a.Get(0));
    EXPECT_TRUE(unchanged()) << "a call on a took the slow lookup on round " << i;
    b.Put(b.Get(0));
    EXPECT_TRUE(unchanged()) << "a call on b took the slow lookup on round " << i;
  }
  // A third pool evicts the one used least recently, and is found through the first hint.
  BasicHandlePool<HostBackend> c(backend);
  c.Put(c.Get(0));
  EXPECT_EQ(detail::this_thread_caches.hints[1].pool_id, b_hint.pool_id) << "b was used last before c";
}


// A thread-local destructor that runs after the thread's exit flush finds neither hint: its calls
// bypass the cache that the flush abandoned, whichever of the two hints named it.
TEST(ThreadCacheHints, NoHintSurvivesTheThreadsExitFlush) {
  HostBackend backend(1);
  BasicHandlePool<HostBackend> a(backend), b(backend);
  bool hinted_after_flush = true;
  std::thread([&] {
    struct CheckAtExit {
      bool *hinted;
      ~CheckAtExit() {
        *hinted = false;
        for (const auto &hint : detail::this_thread_caches.hints)
          if (hint.cache != nullptr) *hinted = true;
      }
    };
    thread_local CheckAtExit check{&hinted_after_flush};  // before the directory's flush: destroyed after it
    (void)check;
    a.Put(a.Get(0));
    b.Put(b.Get(0));  // the hints name b, then a
  }).join();
  EXPECT_FALSE(hinted_after_flush);
}

}  // namespace
}  // namespace evpool
