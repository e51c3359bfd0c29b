// How full a thread fills its magazines (thread_cache.h, "Magazine size"): a thread starts at
// cache_start_capacity and doubles after every cache_growth_trades trades with the depot, up to
// cache_capacity; a thread that never trades keeps the start; Purge and Trim start it over. Read
// from outside: the magazine nodes the pool allocated, and stats()'s split of idle events between
// the depot and the caches.
#include <gtest/gtest.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Policy = DefaultPoolPolicy;
using Pool = BasicEventPool<HostBackend, Policy>;

constexpr std::size_t kStart = Policy::cache_start_capacity;
constexpr std::size_t kCapacity = Policy::cache_capacity;
// Trades before a thread's magazines reach the capacity: one magazine node each.
constexpr std::size_t kTradesToGrow =
    Policy::cache_growth_trades * static_cast<std::size_t>(std::countr_zero(kCapacity / kStart));
static_assert(kStart < kCapacity && std::has_single_bit(kCapacity / kStart));
static_assert(Policy::cache_growth_trades > 3, "three magazines of start take three trades: no growth");

// Gets `count` events on this thread and puts them all back.
void get_and_put(Pool &pool, std::size_t count) {
  std::vector<Event> events;
  for (std::size_t i = 0; i < count; ++i) events.push_back(pool.Get(0));
  for (Event &event : events) pool.Put(std::move(event));
}

std::vector<Event> get_three_magazines_of_start(Pool &pool) {
  std::vector<Event> events;
  for (std::size_t i = 0; i < 3 * kStart; ++i) events.push_back(pool.Get(0));
  return events;
}

// Puts back 3 x start events into a cache with room for them: one that fills to the start keeps
// two magazines and hands the third's worth to the depot (in at most three trades: too few to
// grow); one whose magazines have grown keeps them all. Returns what the depot gained.
std::uint64_t depot_gain_from_putting_back(Pool &pool, std::vector<Event> &held) {
  const std::uint64_t before = pool.stats().devices[0].idle_in_depot;
  for (Event &event : held) pool.Put(std::move(event));
  return pool.stats().devices[0].idle_in_depot - before;
}

TEST(MagazineGrowth, AThreadThatOnlyPutsSoonFillsItsMagazinesToTheCapacity) {
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

TEST(MagazineGrowth, AThreadWhoseGetsAndPutsBalanceKeepsTheStartFill) {
  HostBackend backend(1);
  Pool pool(backend);
  // A million Gets and Puts from the cache: no trade, however many calls.
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

TEST(MagazineGrowth, PurgeStartsTheGrowthOver) {
  HostBackend backend(1);
  Pool pool(backend);
  grow(pool);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  pool.Purge();
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), kStart);
}

TEST(MagazineGrowth, TrimStartsTheGrowthOver) {
  HostBackend backend(1);
  Pool pool(backend);
  grow(pool);
  std::vector<Event> held = get_three_magazines_of_start(pool);
  pool.Trim(kCapacity);  // the cache's events go to the depot, which keeps kCapacity
  EXPECT_EQ(depot_gain_from_putting_back(pool, held), kStart);
}

}  // namespace
}  // namespace evpool
