// The per-thread caches under concurrency, through HostBackend, with caches on, off, and on as
// where membarrier is refused (the owners' fenced path, test/pool_policies.h): threads
// that exit holding cached events, a pool destroyed while threads with caches for it are parked,
// Purge racing Gets and Puts while other threads sleep on full caches, leases that change threads,
// outlive their pool and outlive the threads that began them, and the idle bound. The pool with
// caches and the one without run each test for streams too (HostStreamBackend: the core's stream
// paths, with nothing busy; concurrency_test.cc puts streams back busy).
//
// Each test states the invariant it checks and a change to the core that makes it fail (each was
// tried).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"
#include "tracked_backend.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Token = HostBackend::handle_type;
using test::CachePolicies;
using test::kPerThreadCacheBound;
using test::PolicyName;

// A policy over a backend: events (HostBackend) or streams (HostStreamBackend).
template <class BackendType, class PolicyType>
struct Over {
  using Backend = BackendType;
  using Policy = PolicyType;
};
using Configurations =
    testing::Types<Over<HostBackend, DefaultPoolPolicy>, Over<HostBackend, NoCachePolicy<>>,
                   Over<HostBackend, test::OwnersFenceFullyPolicy>, Over<test::HostStreamBackend, DefaultPoolPolicy>,
                   Over<test::HostStreamBackend, NoCachePolicy<>>>;
struct ConfigurationName {
  template <class Configuration>
  static std::string GetName(int index) {
    return (std::is_same_v<typename Configuration::Backend, HostBackend> ? "" : "Streams") +
           PolicyName::GetName<typename Configuration::Policy>(index);
  }
};

template <class Configuration>
class ThreadCacheConcurrency : public testing::Test {
 protected:
  using Backend = typename Configuration::Backend;
  using Policy = typename Configuration::Policy;
  using TrackedBackend = test::Tracked<Backend>;
  using Pool = BasicHandlePool<Backend, Policy>;
  using TrackedPool = BasicHandlePool<TrackedBackend, Policy>;
};
TYPED_TEST_SUITE(ThreadCacheConcurrency, Configurations, ConfigurationName);

// Gets `count` events of `device`, then puts them back in a shuffled order.
template <class Pool>
void get_and_put_back(Pool &pool, int device, std::size_t count, std::mt19937 &random,
                      std::set<Token> *seen = nullptr) {
  std::vector<Event> events;
  for (std::size_t i = 0; i < count; ++i) {
    events.push_back(pool.Get(device));
    if (seen != nullptr) seen->insert(events.back().get());
  }
  std::shuffle(events.begin(), events.end(), random);
  for (Event &event : events) pool.Put(std::move(event));
}

// (a) Threads that exit while their caches hold hundreds of events leave them to the depots: the
// main thread then gets every event ever created without creating one, and Purge destroys exactly
// what was created. Fails if a thread's exit does not flush its cache.
TYPED_TEST(ThreadCacheConcurrency, ThreadsExitingWithCachedEventsLeaveThemToTheDepots) {
  constexpr int kThreads = 4, kDevices = 2, kRounds = 4;
  typename TestFixture::Backend backend(kDevices);
  typename TestFixture::Pool pool(backend);
  // This thread's cache exists before any other thread exits, and every thread registers before
  // any exits: no registration after an exit collects an exited thread's cache in its stead.
  std::set<Token> seen[kDevices];
  Event first = pool.Get(0);
  seen[0].insert(first.get());
  pool.Put(std::move(first));
  std::latch registered(kThreads);
  std::mutex seen_mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t + 1));
      std::set<Token> mine[kDevices];
      get_and_put_back(pool, t % kDevices, 1, random, &mine[t % kDevices]);
      registered.arrive_and_wait();
      for (int round = 0; round < kRounds; ++round) {
        const int device = static_cast<int>(random() % kDevices);
        get_and_put_back(pool, device, 200 + random() % 101, random, &mine[device]);
      }
      std::lock_guard lock(seen_mutex);
      for (int device = 0; device < kDevices; ++device) seen[device].merge(mine[device]);
    });
  for (std::thread &thread : threads) thread.join();

  // Nothing was destroyed, so every event ever created (each was got by some Get) is idle.
  const std::uint64_t created = backend.created();
  ASSERT_EQ(backend.destroyed(), 0u);
  ASSERT_EQ(created, seen[0].size() + seen[1].size());
  std::vector<Event> got;
  for (int device = 0; device < kDevices; ++device) {
    std::set<Token> again;
    for (std::size_t i = 0; i < seen[device].size(); ++i) {
      got.push_back(pool.Get(device));
      again.insert(got.back().get());
    }
    EXPECT_EQ(again, seen[device]) << "device " << device;
  }
  EXPECT_EQ(backend.created(), created) << "events cached by exited threads did not reach the depots";
  for (Event &event : got) pool.Put(std::move(event));
  pool.Purge();
  EXPECT_EQ(backend.destroyed(), created);
}

// (b) A pool destroyed while threads that cached its events are alive but parked: the destructor
// does not wait for them, destroys their cached events (created == destroyed at once) and deletes
// the core; the threads later use a new pool (as like as not at the old one's address: it never
// hands out a dead pool's event) or other pools, or simply exit, and nothing is used after free.
// Fails if the destructor leaves cached events alive, or if an owner ignores a closed cache (then
// the exiting threads flush into the freed core).
TYPED_TEST(ThreadCacheConcurrency, APoolDestroyedWhileThreadsHoldCachesForItNeitherWaitsNorLeaks) {
  constexpr int kThreads = 3, kEvents = 40;
  typename TestFixture::Backend backend(2);
  typename TestFixture::TrackedBackend tracked(backend);
  const std::weak_ptr<const int> core = tracked.watch();
  std::optional<typename TestFixture::TrackedPool> pool(std::in_place, std::move(tracked));
  std::latch cached(kThreads), resume(1);
  std::mutex dead_mutex;
  std::set<Token> dead;
  std::atomic<int> dead_handed_out{0}, hits_on_the_new_pool{0};
  std::atomic<bool> abandon{false};  // the test failed: the threads only exit

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t + 11));
      std::set<Token> mine;
      for (int round = 0; round < 3; ++round) get_and_put_back(*pool, round % 2, kEvents, random, &mine);
      {
        std::lock_guard lock(dead_mutex);
        dead.merge(mine);
      }
      cached.count_down();
      resume.wait();  // parked, its cache full of the old pool's events
      if (abandon.load()) return;
      switch (t) {
        case 0: {  // the new pool, on a thread whose directory still holds the dead pool's cache
          const std::uint64_t created = backend.created();
          for (int device : {0, 1}) {
            Event event = pool->Get(device);
            if (dead.count(event.get()) != 0) dead_handed_out.fetch_add(1);
            if (backend.created() == created) hits_on_the_new_pool.fetch_add(1);
            pool->Put(std::move(event));
          }
          break;
        }
        case 1: {  // other pools, of their own backend
          typename TestFixture::Backend other_backend(1);
          for (int i = 0; i < 2; ++i) {
            typename TestFixture::Pool other(other_backend);
            get_and_put_back(other, 0, 50, random);
          }
          EXPECT_EQ(other_backend.created(), other_backend.destroyed());
          break;
        }
        default:  // exits at once: the stale cache is dropped at thread exit
          break;
      }
    });

  cached.wait();
  const std::uint64_t created = backend.created();
  EXPECT_EQ(created, dead.size());
  auto destroying = std::async(std::launch::async, [&] { pool.reset(); });
  const bool waited = destroying.wait_for(std::chrono::seconds(20)) == std::future_status::timeout;
  if (waited) {  // let the threads go, so that the test ends
    abandon.store(true);
    resume.count_down();
    destroying.wait();
    for (std::thread &thread : threads) thread.join();
  }
  ASSERT_FALSE(waited) << "the pool's destructor waited for threads that were idle";
  EXPECT_EQ(backend.destroyed(), created) << "cached events of parked threads leaked";
  EXPECT_TRUE(core.expired()) << "no lease is alive: the destructor must delete the core";

  pool.emplace(typename TestFixture::TrackedBackend(backend));
  resume.count_down();
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(dead_handed_out.load(), 0) << "the new pool handed out a destroyed pool's event";
  EXPECT_EQ(hits_on_the_new_pool.load(), 0) << "the new pool's first Gets must create";
  EXPECT_EQ(backend.created(), created + 2);
  pool.reset();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// (c) Purge racing Gets and Puts while other threads sleep with full caches: once Purge returns,
// every event that was idle when it began is destroyed, the sleepers' cached ones included, and
// none of those ever comes back; at the end created == destroyed + held. Fails if Purge empties
// only the caller's cache (or none), and (events destroyed twice) if owners ignore a draining
// purger.
TYPED_TEST(ThreadCacheConcurrency, PurgeRacingGetsAndPutsDestroysTheCachesOfSleepingThreads) {
  constexpr int kSleepers = 2, kWorkers = 2, kPurges = 20;
  constexpr std::size_t kPerSleeper = 64;  // with caches: two full magazines, nothing in the depot
  typename TestFixture::Backend backend(2);
  typename TestFixture::Pool pool(backend);
  // Without caches the sleepers' events lie in device 0's depot, where workers would take them
  // (and then rightly keep them through a Purge): there the workers keep to device 1.
  const bool caches = test::caches_on<typename TestFixture::Policy>();  // none in a checked pool
  const int worker_devices = caches ? 2 : 1;
  const int first_worker_device = caches ? 0 : 1;

  std::set<Token> sleeping;
  std::mutex sleeping_mutex;
  std::latch got_all(kSleepers), parked(kSleepers), wake(1);
  std::atomic<int> came_back{0};
  std::vector<std::thread> sleepers;
  for (int s = 0; s < kSleepers; ++s)
    sleepers.emplace_back([&] {
      std::vector<Event> events;
      for (std::size_t i = 0; i < kPerSleeper; ++i) events.push_back(pool.Get(0));
      {
        std::lock_guard lock(sleeping_mutex);
        for (const Event &event : events) sleeping.insert(event.get());
      }
      got_all.arrive_and_wait();  // all distinct: none is put back before all are got
      for (Event &event : events) pool.Put(std::move(event));
      events.clear();
      parked.count_down();
      wake.wait();
      for (std::size_t i = 0; i < kPerSleeper; ++i) events.push_back(pool.Get(0));
      for (const Event &event : events)
        if (sleeping.count(event.get()) != 0) came_back.fetch_add(1);
      for (Event &event : events) pool.Put(std::move(event));
    });
  parked.wait();
  EXPECT_EQ(backend.created(), kSleepers * kPerSleeper);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> operations{0};
  std::mutex held_mutex;
  std::vector<Event> held;  // what the workers hold when they stop
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      std::mt19937 random(static_cast<unsigned>(w + 101));
      std::vector<Event> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        for (Event &event : mine) pool.Put(std::move(event));
        mine.clear();
        const std::size_t burst = 1 + random() % 8;
        for (std::size_t i = 0; i < burst; ++i) {
          const int device = first_worker_device + static_cast<int>(random() % worker_devices);
          mine.push_back(pool.Get(device));
          if (sleeping.count(mine.back().get()) != 0) came_back.fetch_add(1);
        }
        operations.fetch_add(1, std::memory_order_relaxed);
      }
      std::lock_guard lock(held_mutex);
      for (Event &event : mine) held.push_back(std::move(event));
    });
  while (operations.load(std::memory_order_relaxed) < 500) std::this_thread::yield();

  const std::uint64_t destroyed_before = backend.destroyed();
  pool.Purge();
  EXPECT_GE(backend.destroyed() - destroyed_before, kSleepers * kPerSleeper)
      << "Purge left the sleeping threads' cached events alive";
  for (int i = 0; i < kPurges; ++i) {
    const std::uint64_t at = operations.load(std::memory_order_relaxed);
    while (operations.load(std::memory_order_relaxed) < at + 50) std::this_thread::yield();
    pool.Purge();
  }
  stop.store(true);
  for (std::thread &worker : workers) worker.join();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed() + held.size());

  wake.count_down();
  for (std::thread &sleeper : sleepers) sleeper.join();
  EXPECT_EQ(came_back.load(), 0) << "a purged event was handed out again";
  held.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// (d) Leases that begin on threads that then exit, end on other threads (so single caches count
// negative), and outlive their pool on threads that have caches for it: the pool's destructor
// destroys every idle event at once and leaves the leased ones; the core lives exactly as long as
// the last lease; at the end created == destroyed. Fails if the lease counts of exited threads'
// caches are dropped when the caches are collected (the core dies while leases are alive).
TYPED_TEST(ThreadCacheConcurrency, LeasesChangingThreadsAndOutlivingThePoolAndTheirThreads) {
  using Pool = typename TestFixture::TrackedPool;
  constexpr int kBeginners = 2, kEnders = 3, kLeasesEach = 60, kOperations = 600;
  typename TestFixture::Backend backend(2);
  typename TestFixture::TrackedBackend tracked(backend);
  const std::weak_ptr<const int> core = tracked.watch();
  std::optional<Pool> pool(std::in_place, std::move(tracked));

  struct Board {
    std::mutex mutex;
    std::vector<typename Pool::unique_lease> unique;
    std::vector<typename Pool::shared_lease> shared;
  } board;
  auto post_unique = [&](typename Pool::unique_lease lease) {
    std::lock_guard lock(board.mutex);
    board.unique.push_back(std::move(lease));
  };
  auto post_shared = [&](typename Pool::shared_lease lease) {
    std::lock_guard lock(board.mutex);
    board.shared.push_back(lease);
    board.shared.push_back(std::move(lease));
  };
  // Ends a lease from the board on the calling thread (outside the board's lock).
  auto end_one = [&](bool unique) {
    typename Pool::unique_lease taken_unique;
    typename Pool::shared_lease taken_shared;
    {
      std::lock_guard lock(board.mutex);
      if (unique && !board.unique.empty()) {
        taken_unique = std::move(board.unique.back());
        board.unique.pop_back();
      } else if (!unique && !board.shared.empty()) {
        taken_shared = std::move(board.shared.back());
        board.shared.pop_back();
      }
    }
  };

  // Threads that only begin leases, hand them all over, and exit: their caches count positive.
  std::vector<std::thread> beginners;
  for (int b = 0; b < kBeginners; ++b)
    beginners.emplace_back([&, b] {
      for (int i = 0; i < kLeasesEach; ++i) {
        post_unique(pool->Lease((b + i) % 2));
        post_shared(pool->LeaseShared((b + i + 1) % 2));
      }
    });
  for (std::thread &thread : beginners) thread.join();
  // Some of those stay with this thread to the very end: the core must live until they end.
  std::vector<typename Pool::unique_lease> kept;
  {
    std::lock_guard lock(board.mutex);
    for (int i = 0; i < 8; ++i) {
      kept.push_back(std::move(board.unique.back()));
      board.unique.pop_back();
    }
  }

  // Then threads that register afterwards (collecting the exited threads' caches), end those
  // leases, begin and end their own, and keep some when they park; one more exits meanwhile.
  std::latch parked(kEnders), resume(1);
  std::mutex live_mutex;
  std::set<Token> live;  // what the parked threads hold
  auto work = [&](std::mt19937 &random, std::vector<typename Pool::unique_lease> &mine) {
    for (int op = 0; op < kOperations; ++op) {
      const int device = static_cast<int>(random() % 2);
      switch (random() % 6) {
        case 0: end_one(true); break;
        case 1: end_one(false); break;
        case 2: mine.push_back(pool->Lease(device)); break;
        case 3:
          if (!mine.empty()) mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(random() % mine.size()));
          break;
        case 4: post_shared(pool->LeaseShared(device)); break;
        default: pool->Put(pool->Get(device)); break;
      }
    }
  };
  std::vector<std::thread> enders;
  for (int e = 0; e < kEnders; ++e)
    enders.emplace_back([&, e] {
      std::mt19937 random(static_cast<unsigned>(e + 1001));
      std::vector<typename Pool::unique_lease> mine;
      work(random, mine);
      {
        std::lock_guard lock(live_mutex);
        for (const auto &lease : mine) live.insert(lease.get());
      }
      parked.count_down();
      resume.wait();
      // The pool is gone now: this thread's cache for it is closed.
      for (int i = 0; i < 20; ++i) end_one(i % 2 == 0);
      mine.clear();
    });
  std::thread([&] {
    std::mt19937 random(77);
    std::vector<typename Pool::unique_lease> mine;
    work(random, mine);
    for (auto &lease : mine) post_unique(std::move(lease));
  }).join();
  parked.wait();

  {
    std::lock_guard lock(board.mutex);
    for (const auto &lease : board.unique) live.insert(lease.get());
    for (const auto &lease : board.shared) live.insert(lease.get());
  }
  for (const auto &lease : kept) live.insert(lease.get());
  EXPECT_FALSE(live.empty());
  pool.reset();  // the enders are parked with leases and caches: not waited for
  EXPECT_FALSE(core.expired()) << "the core was deleted while leases are alive";
  EXPECT_EQ(backend.created() - backend.destroyed(), live.size())
      << "the pool's destructor must destroy every idle event and only those";

  resume.count_down();
  for (std::thread &thread : enders) thread.join();
  // The rest end here, one at a time; the core must be there for each (the lease counts of the
  // exited threads' caches are part of the balance).
  int ended_after_the_core = 0;
  auto end_checked = [&](auto &leases) {
    for (auto &lease : leases) {
      if (core.expired()) ++ended_after_the_core;
      lease.reset();
    }
  };
  end_checked(board.unique);
  end_checked(board.shared);
  end_checked(kept);
  EXPECT_EQ(ended_after_the_core, 0) << "the core was deleted while leases were alive";
  run_deferred_work();
  EXPECT_TRUE(core.expired()) << "the last lease must end the core, through the deferred work";
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// (e) The idle bound with caches: with an idle limit L and T threads, while the threads live the
// pool holds at most L + T x 2 x cache_capacity idle events of a device (without caches, L); once
// they have exited their caches went to the depot, which keeps at most L. Fails if exiting threads
// keep their caches, or if Purge misses the caches of live threads.
TYPED_TEST(ThreadCacheConcurrency, TheIdleBoundHoldsWhileThreadsLiveAndIsTheLimitOnceTheyExit) {
  constexpr std::size_t kLimit = 8;
  constexpr int kThreads = 4, kRounds = 6;
  // More than two full magazines: the cache must overflow, and caches that kept everything
  // would break the bound.
  constexpr std::size_t kLastBurst = kPerThreadCacheBound<typename TestFixture::Policy> + 100;
  typename TestFixture::Backend backend(1);
  typename TestFixture::Pool pool(backend, TestFixture::Backend::kDefaultOptions, kLimit);
  std::barrier sync(kThreads + 1);
  auto bursts = [&](std::mt19937 &random) {
    for (int round = 0; round < kRounds; ++round)
      get_and_put_back(pool, 0, round + 1 == kRounds ? kLastBurst : 20 + random() % 81, random);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<unsigned>(t + 7));
      bursts(random);
      sync.arrive_and_wait();  // all alive, holding nothing, caches loaded
      sync.arrive_and_wait();
      bursts(random);
    });

  sync.arrive_and_wait();
  const std::uint64_t idle = backend.created() - backend.destroyed() - pool.retired_handles(0);
  EXPECT_LE(idle, kLimit + kThreads * kPerThreadCacheBound<typename TestFixture::Policy>)
      << "more idle events than limit + threads x 2 x cache_capacity";
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "Purge missed events in live threads' caches";
  sync.arrive_and_wait();
  for (std::thread &thread : threads) thread.join();
  EXPECT_LE(backend.created() - backend.destroyed() - pool.retired_handles(0), kLimit)
      << "the exited threads' caches must go to the depot, which keeps at most the limit";
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

}  // namespace
}  // namespace evpool
