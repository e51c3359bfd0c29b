// The cap under concurrency (pool_cap.h): many threads drive the worst pattern against it, Gets
// and leases held and handed back in every order, leases released, handles from outside put in
// and refused, Trims, flushes, while a checker counts the handles that exist through the pool;
// and the waits at the cap share their work: one cache flush and one sweep of the set-aside
// streams serve every Get waiting for them. Runs under ThreadSanitizer in the full run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_cap.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

using std::chrono::nanoseconds;

template <class Backend, class Policy>
using Config = test::BackendAndPolicy<Backend, Policy>;
using Configs =
    ::testing::Types<Config<HostBackend, DefaultPoolPolicy>, Config<HostBackend, NoCachePolicy<>>,
                     Config<test::HostStreamBackend, StreamPoolPolicy>, Config<test::HostStreamBackend, NoCachePolicy<>>>;
using ConfigName = test::BackendAndPolicyName;

template <class C>
class CapStress : public ::testing::Test {};
TYPED_TEST_SUITE(CapStress, Configs, ConfigName);

// Each thread, at random: gets and leases (most without waiting, some waiting a little), holds up
// to a few, hands them back, releases leases, makes handles outside the pool and puts them in
// (refused at the cap) or destroys them, flushes its cache; one in a while a Trim. A checker
// thread counts what exists through the pool: the handles alive less those the test holds
// outside it, under the lock that every move across the pool's edge by the test takes, so that
// each sample sees such a move whole. The pool's own creations and destructions are read created
// first, so a sample never counts more than existed at once.
TYPED_TEST(CapStress, NeverMoreThanTheCapNothingHandedOutTwiceNothingLost) {
  using Backend = typename TypeParam::Backend;
  using Pool = BasicHandlePool<Backend, typename TypeParam::Policy>;
  using Owner = typename Pool::owner_type;
  using Lease = typename Pool::unique_lease;
  constexpr bool kStreams = BusyHandleBackend<Backend>;
  constexpr int kThreads = 16, kSteps = 3000;
  constexpr std::size_t kCap = 24, kLimit = 6;
  Backend backend(1);
  Pool pool(backend, Backend::kDefaultOptions, kLimit, Checks::kDefault, kCap);

  std::mutex edge;                // every move of a handle across the pool's edge by the test
  std::int64_t held_outside = 0;  // handles the test holds outside the pool, under `edge`
  constexpr std::size_t kSerials = std::size_t{1} << 18;
  auto holders = std::make_unique<std::atomic<int>[]>(kSerials);  // 1: handed out and held now
  std::atomic<int> handed_out_twice{0}, returned_unheld{0}, handed_out_busy{0}, serial_overflow{0};
  std::atomic<std::int64_t> worst_excess{-1000};
  const auto hold = [&](typename Backend::handle_type token) {
    const auto serial = HostBackend::serial_of(token);
    if (serial >= kSerials) return void(++serial_overflow);
    if (holders[serial].exchange(1, std::memory_order_relaxed) != 0) ++handed_out_twice;
  };
  const auto unhold = [&](typename Backend::handle_type token) {
    const auto serial = HostBackend::serial_of(token);
    if (serial >= kSerials) return;
    if (holders[serial].exchange(0, std::memory_order_relaxed) != 1) ++returned_unheld;
  };
  const auto check_handed_out = [&](typename Backend::handle_type token) {
    hold(token);
    if constexpr (kStreams)
      if (!backend.asked_idle_since_busy(token)) ++handed_out_busy;
  };
  const auto make_busy = [&](typename Backend::handle_type token) {
    if constexpr (kStreams) backend.make_busy(token, 6);  // done after 6 more queries of any stream
  };

  std::atomic<bool> working{true};
  std::thread checker([&] {
    while (working.load(std::memory_order_relaxed)) {
      std::int64_t excess;
      {
        std::lock_guard<std::mutex> lock(edge);
        const auto created = static_cast<std::int64_t>(backend.created());
        const auto destroyed = static_cast<std::int64_t>(backend.destroyed());
        excess = created - destroyed - held_outside - static_cast<std::int64_t>(kCap);
      }
      std::int64_t worst = worst_excess.load(std::memory_order_relaxed);
      while (excess > worst && !worst_excess.compare_exchange_weak(worst, excess)) {
      }
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(t + 1);
      const auto next = [&state] {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        return state;
      };
      std::vector<Owner> got, outside;
      std::vector<Lease> leases;
      const auto hand_back_one = [&] {
        if (!got.empty()) {
          unhold(got.back().get());
          make_busy(got.back().get());
          pool.Put(std::move(got.back()));
          got.pop_back();
        } else if (!leases.empty()) {
          unhold(leases.back().get());
          make_busy(leases.back().get());
          leases.pop_back();
        }
      };
      for (int step = 0; step < kSteps; ++step) {
        const nanoseconds patience(next() % 4 == 0 ? 200'000 : 0);
        try {
          switch (next() % 12) {
            case 0:
            case 1:
            case 2:
              if (got.size() < 3) {
                got.push_back(pool.GetWithin(patience, 0));
                check_handed_out(got.back().get());
              } else {
                hand_back_one();
              }
              break;
            case 3:
            case 4:
              if (leases.size() < 2) {
                leases.push_back(pool.LeaseWithin(patience, 0));
                check_handed_out(leases.back().get());
              } else {
                hand_back_one();
              }
              break;
            case 5:
            case 6: hand_back_one(); break;
            case 7:
              if (!leases.empty()) {
                std::lock_guard<std::mutex> lock(edge);
                unhold(leases.back().get());
                ++held_outside;  // before it leaves the count: a sample never counts it twice
                outside.push_back(leases.back().release());
                leases.pop_back();
              }
              break;
            case 8:
              if (outside.size() < 2) {
                std::lock_guard<std::mutex> lock(edge);
                ++held_outside;
                outside.push_back(backend.adopt(backend.create(Backend::kDefaultOptions, 0), next() % 2 ? 0 : -1));
              }
              break;
            case 9:
              if (!outside.empty()) {
                std::lock_guard<std::mutex> lock(edge);
                try {
                  if (outside.back().device_id() == -1)
                    pool.Put(std::move(outside.back()));  // bare: foreign by what it records
                  else
                    pool.PutForeign(std::move(outside.back()));
                  --held_outside;
                  outside.pop_back();
                } catch (const CapReachedError &) {
                  if (!outside.back()) ++returned_unheld;  // a refused Put must leave it with the caller
                }
              }
              break;
            case 10:
              if (!outside.empty()) {
                std::lock_guard<std::mutex> lock(edge);
                outside.pop_back();  // destroyed
                --held_outside;
              }
              break;
            default:
              if (next() % 64 == 0)
                pool.Trim(2);
              else
                pool.FlushThreadCache();
          }
        } catch (const CapReachedError &) {
          hand_back_one();  // at the cap: let others go on
        }
      }
      while (!got.empty() || !leases.empty()) hand_back_one();
      std::lock_guard<std::mutex> lock(edge);
      held_outside -= static_cast<std::int64_t>(outside.size());
      outside.clear();
    });
  }
  for (std::thread &thread : threads) thread.join();
  working.store(false);
  checker.join();

  EXPECT_LE(worst_excess.load(), 0) << "more handles existed through the pool than its cap";
  EXPECT_EQ(handed_out_twice.load(), 0);
  EXPECT_EQ(returned_unheld.load(), 0);
  EXPECT_EQ(handed_out_busy.load(), 0);
  ASSERT_EQ(serial_overflow.load(), 0);
  EXPECT_LE(backend.created() - backend.destroyed(), kCap);
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "a handle was lost";
}

// One flush of every cache serves every Get waiting at the cap: W threads that begin to wait
// together flush once (and then about once per 64 rounds of waiting), not W times. The pool holds
// its whole cap in this thread's leases until every waiter has begun to wait; then the leases end
// and this thread's cache goes to the depot, where the waiters find them.
TEST(CapWaits, OneCacheFlushServesEveryWaiter) {
  constexpr int kWaiters = 16;
  HostBackend backend(1);
  BasicHandlePool<HostBackend> pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault,
                                    kWaiters);
  std::vector<BasicHandlePool<HostBackend>::unique_lease> mine;
  for (int i = 0; i < kWaiters; ++i) mine.push_back(pool.Lease(0));
  const auto began = std::chrono::steady_clock::now();
  std::atomic<int> served{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w)
    waiters.emplace_back([&] {
      auto lease = pool.LeaseWithin(std::chrono::seconds(60), 0);
      served.fetch_add(1);
      while (served.load() < kWaiters) std::this_thread::yield();  // hold it: no waiter gets two
    });
  while (pool.stats().total().waits_at_cap < kWaiters) std::this_thread::yield();
  mine.clear();
  pool.FlushThreadCache();
  for (std::thread &waiter : waiters) waiter.join();
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.waits_at_cap, std::uint64_t{kWaiters});
  // One at first; more only as the waiters wait long enough for their periodic flushes, which are
  // at least 54 ms apart (the next test): W flushes at once are caught unless this took W x 50 ms.
  EXPECT_LE(figures.cache_flushes_at_cap, static_cast<std::uint64_t>(1 + waited_ms / 50))
      << kWaiters << " waiters flushed " << figures.cache_flushes_at_cap << " times in " << waited_ms << " ms";
  EXPECT_EQ(backend.created(), std::uint64_t{kWaiters});
}

// Waiters that wait long flush about once per kRoundsBetweenFlushes rounds between them, not once
// each: a waiter flushes at its turn only if no flush began since its last look, and its looks are
// 64 rounds (at least 54 ms of 1 ms pauses) apart, so two flushes are at least that far apart,
// however many wait. The waiters wait about 400 ms here; flushing at each turn they flushed about
// 8 times as often as the bound.
TEST(CapWaits, WaitersWaitingLongFlushAboutOncePerTurnBetweenThem) {
  constexpr int kWaiters = 8;
  HostBackend backend(1);
  BasicHandlePool<HostBackend> pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault,
                                    kWaiters);
  if (test::pools_are_checked()) GTEST_SKIP() << "checked pools keep no caches to flush";
  std::vector<BasicHandlePool<HostBackend>::unique_lease> mine;
  for (int i = 0; i < kWaiters; ++i) mine.push_back(pool.Lease(0));
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w)
    waiters.emplace_back([&] { auto lease = pool.LeaseWithin(std::chrono::seconds(60), 0); });
  while (pool.stats().total().waits_at_cap < kWaiters) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  mine.clear();
  pool.FlushThreadCache();
  for (std::thread &waiter : waiters) waiter.join();
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
  const std::uint64_t flushes = pool.stats().total().cache_flushes_at_cap;
  EXPECT_LE(flushes, static_cast<std::uint64_t>(2 + waited_ms / 50))
      << kWaiters << " waiters flushed " << flushes << " times in " << waited_ms << " ms";
}

// A sweep of the set-aside streams serves every Get waiting for it. Streams set aside busy (on the
// tick clock, which this test never advances), no caches; one Get sweeps, its first query held
// until W more Gets wait for the sweep (the policy's spin_wait tells when each begins to); the
// sweep finds every stream busy, and the waiters take its verdict and create without asking: the
// queries are the sweep's S, not S + W x S.
struct CountsWaiters : NoCachePolicy<StreamPoolPolicy> {
  static inline std::atomic<int> waiting{0};
  static void spin_wait() noexcept {
    thread_local bool counted = false;
    if (!std::exchange(counted, true)) waiting.fetch_add(1);
    std::this_thread::yield();
  }
};

class GatedStreamBackend : public test::HostStreamBackend {
 public:
  using HostStreamBackend::HostStreamBackend;
  /// The next query waits until open() (the query counts before it waits).
  void close_the_gate() { gate_->closed.store(true); }
  void open() { gate_->closed.store(false); }
  bool someone_at_the_gate() const { return gate_->waiting.load(); }
  bool has_pending_work(handle_type token) const noexcept {
    const bool busy = HostStreamBackend::has_pending_work(token);
    if (gate_->closed.load()) {
      gate_->waiting.store(true);
      while (gate_->closed.load()) std::this_thread::yield();
    }
    return busy;
  }

 private:
  struct Gate {
    std::atomic<bool> closed{false}, waiting{false};
  };
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
};

// The scene of the sweep tests: kSetAside streams set aside busy for `busy_for` ticks (then the
// clock moves by `advance`); one Get sweeps them, its first query held at the gate until kWaiters
// more Gets wait for its sweep (the policy's spin_wait tells when each begins to). Every Get holds
// its stream until all have one, so that none comes back into the depot meanwhile. Returns the
// backend's queries from the sweep on.
using GatedPool = BasicHandlePool<GatedStreamBackend, CountsWaiters>;
constexpr int kSetAside = 16, kWaiters = 8;

std::uint64_t sweep_with_waiters(GatedStreamBackend &backend, GatedPool &pool, std::uint32_t busy_for,
                                 std::uint64_t advance) {
  {
    std::vector<GatedPool::unique_lease> leases;
    for (int i = 0; i < kSetAside; ++i) leases.push_back(pool.Lease(0));
    for (auto &lease : leases) backend.make_busy(lease.get(), busy_for);
  }
  auto sets_aside = pool.Lease(0);  // asks the depot's streams, sets them aside, creates
  EXPECT_EQ(pool.busy_handles(0), std::uint64_t{kSetAside});
  backend.advance(advance);
  const std::uint64_t queries = backend.queries();
  CountsWaiters::waiting.store(0);
  backend.close_the_gate();
  GatedPool::unique_lease swept;  // held: it stays out of the depot
  std::thread sweeper([&] { swept = pool.Lease(0); });
  while (!backend.someone_at_the_gate()) std::this_thread::yield();
  std::atomic<int> served{0};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w)
    waiters.emplace_back([&] {
      auto lease = pool.Lease(0);
      served.fetch_add(1);
      while (served.load() < kWaiters) std::this_thread::yield();
    });
  while (CountsWaiters::waiting.load() < kWaiters) std::this_thread::yield();
  backend.open();
  sweeper.join();
  for (std::thread &waiter : waiters) waiter.join();
  return backend.queries() - queries;
}

TEST(CapWaits, OneSweepServesEveryGetWaitingForIt) {
  GatedStreamBackend backend(1, test::HostStreamBackend::Clock::kTicks);
  GatedPool pool(backend);
  const std::uint64_t queries = sweep_with_waiters(backend, pool, 1'000'000, 0);
  // The sweep's S, and each Get's tidy after it took its stream (tidy_set_aside: one magazine, of
  // one stream without caches).
  EXPECT_LE(queries, std::uint64_t{kSetAside + 1 + kWaiters}) << "Gets asked again what a sweep found busy";
  EXPECT_EQ(backend.created(), std::uint64_t{kSetAside + 2 + kWaiters});
}

// A Get that waited for a sweep which found an idle stream (and took it) sweeps in turn, for
// another: the verdict "every stream busy" is only a sweep's that found none. Here every stream
// set aside is idle by the time the sweep asks; W Gets wait for it, and none creates.
TEST(CapWaits, AGetThatWaitedForASweepThatFoundAnIdleStreamSweepsInTurn) {
  GatedStreamBackend backend(1, test::HostStreamBackend::Clock::kTicks);
  GatedPool pool(backend);
  sweep_with_waiters(backend, pool, 1'000, 2'000);  // every stream set aside is idle when it sweeps
  EXPECT_EQ(backend.created(), std::uint64_t{kSetAside + 1}) << "a Get created where a stream set aside was idle";
}

}  // namespace
}  // namespace evpool
