// How full a thread fills its magazines (thread_cache.h, "Magazine size"): a thread starts at
// cache_start_capacity and doubles after every cache_growth_trades trades with the depot, up to
// cache_capacity; a thread that never trades keeps the start; Purge and Trim start it over. Read
// from outside: the magazine nodes the pool allocated, and stats()'s split of idle events between
// the depot and the caches.
#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <latch>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "support/idle_events.h"
#include "pool_policies.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Policy = DefaultPoolPolicy;
using Pool = BasicHandlePool<HostBackend, Policy>;

constexpr std::size_t kStart = Policy::cache_start_capacity;
constexpr std::size_t kCapacity = Policy::cache_capacity;
// Trades before a thread's magazines reach the capacity: one magazine node each.
constexpr std::size_t kTradesToGrow =
    Policy::cache_growth_trades * static_cast<std::size_t>(std::countr_zero(kCapacity / kStart));
static_assert(kStart < kCapacity && std::has_single_bit(kCapacity / kStart));
static_assert(Policy::cache_growth_trades == 4, "the trade counts below are worked out for 4");

// Gets `count` events of device 0 on this thread and holds them.
std::vector<Event> get(Pool &pool, std::size_t count) {
  std::vector<Event> events;
  for (std::size_t i = 0; i < count; ++i) events.push_back(pool.Get(0));
  return events;
}

// Gets `count` events on this thread and puts them all back.
void get_and_put(Pool &pool, std::size_t count) { testing_support::fill(pool, 0, static_cast<int>(count)); }

std::vector<Event> get_three_magazines_of_start(Pool &pool) { return get(pool, 3 * kStart); }

// Puts back 3 x start events into a cache with room for them: one that fills to the start keeps
// two magazines and hands the third's worth to the depot (one trade: too few to grow); one whose
// magazines have grown keeps them all. Returns what the depot gained.
std::uint64_t depot_gain_from_putting_back(Pool &pool, std::vector<Event> &held) {
  const std::uint64_t before = pool.stats().devices[0].idle_in_depot;
  for (Event &event : held) pool.Put(std::move(event));
  return pool.stats().devices[0].idle_in_depot - before;
}

TEST(MagazineGrowth, AThreadThatOnlyPutsSoonFillsItsMagazinesToTheCapacity) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  constexpr std::size_t kEvents = 16 * kCapacity;
  get_and_put(pool, kEvents);
  // Every trade of these Puts took one new node. At the start fill they would take kEvents /
  // kStart (128); doubling, a dozen trades at smaller fills and then one per kCapacity events
  // (24 here); growing by kStart at a time instead, 30.
  EXPECT_LE(pool.node_count(), kTradesToGrow + kEvents / kCapacity)
      << "the magazines did not grow to " << kCapacity << " events within " << kTradesToGrow << " trades";
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_LE(figures.idle_in_caches, 2 * kCapacity);
  EXPECT_EQ(figures.idle, kEvents);
}

TEST(MagazineGrowth, TheFillDoublesAtTheGrowthTradeExactly) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  std::vector<Event> held = get(pool, 7 * kStart + 1);  // all created first: the Gets trade nothing
  // Puts 1 to 2 x start fill the cache's two magazines; Puts 2, 3, 4 and 5 x start + 1 each hand
  // a magazine of start events to the depot, and the 4th of those trades doubles the fill: the
  // magazine loaded then takes 2 x start events, to Put 7 x start, and the next Put trades again.
  const std::uint64_t before = pool.stats().devices[0].idle_in_depot;
  for (std::size_t i = 0; i < 7 * kStart; ++i) pool.Put(std::move(held[i]));
  EXPECT_EQ(pool.stats().devices[0].idle_in_depot - before, 4 * kStart);
  pool.Put(std::move(held.back()));
  EXPECT_EQ(pool.stats().devices[0].idle_in_depot - before, 5 * kStart);
}

TEST(MagazineGrowth, AThreadWhoseGetsAndPutsBalanceKeepsTheStartFill) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  // A million Gets and Puts from the cache: no trade (the first Put only loads an empty
  // magazine), however many calls.
  for (int i = 0; i < 1'000'000; ++i) pool.Put(pool.Get(0));
  std::vector<Event> held = get_three_magazines_of_start(pool);
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), kStart)
      << "calls that never reach the depot must not grow the magazines";
}

// Grows this thread's magazines, and checks that they grew.
void grow(Pool &pool) {
  get_and_put(pool, 16 * kCapacity);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  ASSERT_EQ(depot_gain_from_putting_back(pool, held), 0u) << "grown, the cache keeps them all";
}

// On a thread of its own, which then exits: its cache goes to the depot in full magazines.
void grow_and_exit(Pool &pool) { get_and_put(pool, 16 * kCapacity); }

TEST(MagazineGrowth, PurgeStartsTheGrowthOver) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  grow(pool);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  pool.Purge();
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), kStart);
}

TEST(MagazineGrowth, PurgeStartsTheTradeCountOverToo) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  std::vector<Event> held = get(pool, 5 * kStart);  // first, so that getting them trades nothing
  get_and_put(pool, 3 * kStart + 1);                // two trades: Puts 2 x start + 1 and 3 x start + 1
  pool.Purge();
  // From a count of 0, Puts 2, 3 and 4 x start + 1 trade (three trades, no growth): the depot
  // gains 3 x start. From a count of 2 the second of them grows the fill to 2 x start, and the
  // rest stays in the cache.
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), 3 * kStart);
}

TEST(MagazineGrowth, FlushThreadCacheKeepsTheGrowth) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  grow(pool);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  pool.FlushThreadCache();  // the thread's events go to the depot; its flow has not changed
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), 0u);
}

TEST(MagazineGrowth, TakingFilledMagazinesFromTheDepotGrowsTheFillToo) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  pool.Reserve(0, 16 * kCapacity);                      // magazines of start events
  std::vector<Event> held = get(pool, 16 * kCapacity);  // 128 trades
  ASSERT_EQ(backend.created(), 16 * kCapacity);
  std::vector<Event> some(std::make_move_iterator(held.end() - 3 * kStart), std::make_move_iterator(held.end()));
  EXPECT_EQ(depot_gain_from_putting_back(pool, some), 0u) << "a Get-heavy thread's Puts fill grown magazines";
}

TEST(MagazineGrowth, EndingLeasesFillsToTheLimitLikePut) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  std::vector<Pool::unique_lease> leases;
  for (std::size_t i = 0; i < 3 * kStart; ++i) leases.push_back(pool.Lease(0));
  const std::uint64_t before = pool.stats().devices[0].idle_in_depot;
  leases.clear();  // the inlined lease end goes through the same fill limit
  EXPECT_EQ(pool.stats().devices[0].idle_in_depot - before, kStart);
}

TEST(MagazineGrowth, AThreadFeedingAFullDepotDoesNotGrow) {
  HostBackend backend(1);
  constexpr std::size_t kLimit = 8;
  Pool pool(backend, HostBackend::kDefaultOptions, kLimit);
  get_and_put(pool, 16 * kCapacity);  // the depot fills to the limit; the rest is retired
  // Had those hand-overs counted as trades, the cache would keep up to 2 x capacity.
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_LE(figures.idle_in_caches, 2 * kStart);
  EXPECT_EQ(backend.created() - backend.destroyed(), figures.idle + figures.retired);
}

TEST(MagazineGrowth, ReserveServesEveryThreadsFirstGets) {
  HostBackend backend(1);
  Pool pool(backend);
  constexpr int kThreads = 4;
  pool.Reserve(0, kThreads * kStart);
  // Each thread keeps its cache loaded (and holds its event) until all have got one: a thread
  // that took more than a magazine of start events would leave another to create.
  std::latch all_got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      Event event = pool.Get(0);
      all_got.arrive_and_wait();
      pool.Put(std::move(event));
    });
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(backend.created(), kThreads * kStart) << "a thread's first Get took more than its share";
}

// A magazine from the depot may be fuller than the taker's fill limit: it counts as full, and
// Puts go to another magazine (never past its end). Checked by every event's coming back once.
TEST(MagazineGrowth, AMagazineFullerThanTheTakersLimitIsNeverOverfilled) {
  HostBackend backend(1);
  Pool pool(backend);
  std::thread(grow_and_exit, std::ref(pool)).join();  // the depot now holds full magazines
  // The first Get loads a full magazine, capacity - 1 left: over this thread's fill limit.
  std::vector<Event> held = get(pool, 3 * kCapacity + 1);
  for (Event &event : held) pool.Put(std::move(event));
  const std::uint64_t created = backend.created();
  std::set<HostBackend::handle_type> tokens;
  for (std::size_t i = 0; i < created; ++i) {
    Event event = pool.Get(0);
    EXPECT_TRUE(tokens.insert(event.get()).second) << "event " << event.get() << " handed out twice";
    held.push_back(std::move(event));
  }
  EXPECT_EQ(backend.created(), created) << "an idle event was lost";
  held.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TEST(MagazineGrowth, TrimStartsTheGrowthOver) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend);
  grow(pool);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  pool.Trim(kCapacity);  // the cache's events go to the depot, which keeps kCapacity
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), kStart);
}

}  // namespace
}  // namespace evpool
