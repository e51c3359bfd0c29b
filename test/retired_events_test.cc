// Retired events (detail/retired_handles.h): a Get that finds no idle event reuses a retired one
// before it creates, and a Get destroys only those that demand has shown surplus, a few at a
// time. So a steady cycle creates and destroys nothing after its first round, the events the pool
// created stay within the bound of the design under any pattern, and the retired events of a
// demand that fell are destroyed by later Gets. For events and for the stream seam (the core's
// busy-handle paths, with every stream idle), with caches and without.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

template <class Backend, class Policy>
using Config = test::BackendAndPolicy<Backend, Policy>;
using Configs =
    ::testing::Types<Config<HostBackend, DefaultPoolPolicy>, Config<HostBackend, NoCachePolicy<>>,
                     Config<test::HostStreamBackend, DefaultPoolPolicy>, Config<test::HostStreamBackend, NoCachePolicy<>>>;
using ConfigName = test::BackendAndPolicyName;

template <class C>
class RetiredEvents : public ::testing::Test {
 protected:
  using Backend = typename C::Backend;
  using Pool = BasicHandlePool<Backend, typename C::Policy>;
  using Event = typename Pool::owner_type;
  // Whether the pools keep thread caches in this run (none when checked: pool_policies.h).
  static bool caches_on() { return test::caches_on<typename C::Policy>(); }

  // One thread's Gets and Puts on device 0, with what the bound needs: the most events out at once.
  struct Driver {
    Driver(Pool &pool_to_drive, Backend &its_backend) : pool(pool_to_drive), backend(its_backend) {}

    Pool &pool;
    Backend &backend;
    std::vector<Event> out;
    std::size_t most_out = 0;
    std::uint64_t alive_over_bound = 0;  // the worst excess seen over the bound, 0 if it held

    void get(std::size_t count, std::size_t idle_bound) {
      for (std::size_t i = 0; i < count; ++i) {
        out.push_back(pool.Get(0));
        most_out = std::max(most_out, out.size());
        const std::uint64_t alive = backend.created() - backend.destroyed(), bound = most_out + idle_bound;
        if (alive > bound) alive_over_bound = std::max(alive_over_bound, alive - bound);
      }
    }
    void put(std::size_t count) {
      for (std::size_t i = 0; i < count && !out.empty(); ++i) {
        pool.Put(std::move(out.back()));
        out.pop_back();
      }
    }
    void cycle(std::size_t count, std::size_t idle_bound) {
      get(count, idle_bound);
      put(count);
    }
  };

  // The events one thread may find idle: the depot's limit, and two magazines in its cache.
  static std::size_t idle_bound(std::size_t limit) {
    return limit + test::kPerThreadCacheBound<typename C::Policy>;
  }
};
TYPED_TEST_SUITE(RetiredEvents, Configs, ConfigName);

// The cycle of the issue that asked for this: N events got at once, then put back, with an idle
// limit far below N. The first round creates N and retires what the limit and the cache cannot
// keep; every later round takes them all back and puts them back, creating and destroying
// nothing. Also with a limit just below N (1,000 of 1,010), where most Gets find an idle event
// and only the last few need a retired one, and for a ramp that grows by one event in four Gets
// (4 Gets, 3 Puts, to 600), the slowest that a window of four times the stock keeps whole.
TYPED_TEST(RetiredEvents, ASteadyCycleCreatesAndDestroysNothingAfterItsFirstRound) {
  struct Case {
    std::size_t got, limit, ramp_gets;  // ramp_gets 0: all got at once
  };
  for (const Case c : {Case{600, 4, 0}, Case{2'000, 4, 0}, Case{1'010, 1'000, 0}, Case{600, 4, 4}}) {
    typename TestFixture::Backend backend(1);
    typename TestFixture::Pool pool(backend, TestFixture::Backend::kDefaultOptions, c.limit);
    typename TestFixture::Driver driver{pool, backend};
    const std::size_t bound = TestFixture::idle_bound(c.limit);
    const auto round = [&] {
      while (driver.out.size() < c.got) {
        driver.get(c.ramp_gets == 0 ? c.got : c.ramp_gets, bound);
        driver.put(c.ramp_gets == 0 ? 0 : c.ramp_gets - 1);
      }
      driver.put(driver.out.size());
    };
    round();
    const std::uint64_t created = backend.created();
    ASSERT_GE(created, c.got);
    if (c.got > bound) {
      ASSERT_GT(pool.retired_handles(0), 0u) << "the cycle retires nothing: it tests nothing";
    }
    for (int n = 2; n <= 10; ++n) {
      round();
      const std::string what = "round " + std::to_string(n) + " of " + std::to_string(c.got) + ", limit " +
                               std::to_string(c.limit) + ", ramp " + std::to_string(c.ramp_gets);
      EXPECT_EQ(backend.created(), created) << what;
      EXPECT_EQ(backend.destroyed(), 0u) << what;
    }
  }
}

// The bound of the design (retired_handles.h): of the events the pool created, those alive never
// exceed the most out at once plus the idle bound, whatever the pattern. Checked after every Get
// of the worst patterns found on the seam: bursts that return after long stretches of small demand
// (which make the pool destroy the burst's events as surplus, so that the next burst creates
// again; a flush after each small round, so that with caches too its Gets leave the fast path),
// and ramps whose demand grows more slowly than a window measures (one event in 9 Gets).
TYPED_TEST(RetiredEvents, TheEventsAliveStayWithinTheMostOutAtOncePlusTheIdleBound) {
  constexpr std::size_t kLimit = 4;
  typename TestFixture::Backend backend(1);
  typename TestFixture::Pool pool(backend, TestFixture::Backend::kDefaultOptions, kLimit);
  typename TestFixture::Driver driver{pool, backend};
  const std::size_t bound = TestFixture::idle_bound(kLimit);
  for (int round = 0; round < 3; ++round) {
    driver.cycle(600, bound);
    for (int small = 0; small < 1'000; ++small) {
      driver.cycle(10, bound);
      pool.FlushThreadCache();
    }
    while (driver.out.size() < 500) {  // a ramp: 9 Gets, 8 Puts
      driver.get(9, bound);
      driver.put(8);
    }
    driver.put(driver.out.size());
  }
  EXPECT_GT(backend.destroyed(), 0u) << "the pattern never made the pool destroy: it tests less than it says";
  EXPECT_GT(backend.created(), 600u) << "no burst created again: it tests less than it says";
  EXPECT_EQ(driver.alive_over_bound, 0u) << "events alive beyond the most out at once plus " << bound;
}

// Demand falls: after rounds of 600, a thread uses few events at a time. The retired events that
// stay unused through a whole window are destroyed by the Gets that leave the fast path, at most
// kRetiredDestroyedPerGet by one Get, and none is created meanwhile: what stays alive is the new
// demand and the idle bound. Without caches every Get leaves the fast path: a window lasts
// retired_window_gets(retired, limit) Gets, and the window in progress, one whole and
// the Gets that destroy bound how many it takes. With caches only the Gets that refill do (rounds
// of 100 outgrow a cache whose magazines are still filled to fewer, about one Get a round here),
// so it takes as many more Gets as the cache absorbs.
TYPED_TEST(RetiredEvents, RetiredEventsAreDestroyedAFewAGetOnceDemandFalls) {
  constexpr std::size_t kLimit = 4, kBurst = 600;
  typename TestFixture::Backend backend(1);
  typename TestFixture::Pool pool(backend, TestFixture::Backend::kDefaultOptions, kLimit);
  typename TestFixture::Driver driver{pool, backend};
  const std::size_t bound = TestFixture::idle_bound(kLimit);
  driver.cycle(kBurst, bound);
  driver.cycle(kBurst, bound);
  const std::uint64_t retired = pool.retired_handles(0), created = backend.created();
  ASSERT_GT(retired, std::uint64_t{detail::kRetiredDestroyedPerGet});
  const std::size_t small = TestFixture::caches_on() ? 100 : 1;
  const std::uint64_t window = detail::retired_window_gets(retired, kLimit);
  const std::uint64_t most_gets = TestFixture::caches_on() ? 1'000'000 : 3 * window + retired;
  std::uint64_t gets = 0, most_at_once = 0;
  while (pool.retired_handles(0) > 0 && gets < most_gets) {
    for (std::size_t i = 0; i < small; ++i, ++gets) {
      const std::uint64_t before = backend.destroyed();
      driver.get(1, bound);
      most_at_once = std::max(most_at_once, backend.destroyed() - before);
    }
    driver.put(small);
  }
  EXPECT_EQ(pool.retired_handles(0), 0u) << "still retired after " << gets << " Gets of a demand of " << small;
  EXPECT_EQ(backend.created(), created) << "a Get created while retired events were kept";
  EXPECT_LE(backend.created() - backend.destroyed(), small + bound)
      << "alive: more than the demand and the idle bound";
  EXPECT_EQ(most_at_once, std::uint64_t{detail::kRetiredDestroyedPerGet}) << "the most one Get destroyed";
}

// The bound on how long a retired handle outlives its retirement, whatever the traffic
// (retired_handles.h, "Bound"): after a fallen peak, rounds of 10 Gets and Puts, which a cache
// absorbs whole (no Get leaves the fast path), still destroy the retired handles, because every
// thread's 256th Get of a device looks at them. Time counts in Gets, a cache's in batches of 256: a
// stock of R retired that no Get takes is gone within three windows and R / 8 looks.
TYPED_TEST(RetiredEvents, RetiredHandlesGoWithinTheBoundEvenWhenTheCacheAbsorbsEveryGet) {
  constexpr std::size_t kLimit = 4, kBurst = 600, kRound = 10;
  typename TestFixture::Backend backend(1);
  typename TestFixture::Pool pool(backend, TestFixture::Backend::kDefaultOptions, kLimit);
  typename TestFixture::Driver driver{pool, backend};
  const std::size_t bound = TestFixture::idle_bound(kLimit);
  driver.cycle(kBurst, bound);
  driver.cycle(kBurst, bound);
  const std::uint64_t retired = pool.retired_handles(0);
  ASSERT_GT(retired, std::uint64_t{detail::kRetiredDestroyedPerGet});
  const std::uint64_t unit = TestFixture::caches_on() ? 256 : 1;  // the Gets one look stands for
  const std::uint64_t window = detail::retired_window_gets(retired, kLimit) + unit;
  const std::uint64_t most_gets =
      3 * window + unit * ((retired + detail::kRetiredDestroyedPerGet - 1) / detail::kRetiredDestroyedPerGet + 1);
  // Without caches each round retires what the limit cannot keep and takes it back the next: its
  // own working set, no longer the peak's.
  const std::uint64_t working_set = TestFixture::caches_on() ? 0 : kRound - kLimit;
  std::uint64_t gets = 0;
  while (pool.retired_handles(0) > working_set && gets < most_gets) {
    driver.cycle(kRound, bound);
    gets += kRound;
  }
  EXPECT_LE(pool.retired_handles(0), working_set)
      << "still retired after " << gets << " Gets in rounds of " << kRound << " (" << retired << " at first)";
  EXPECT_LE(backend.created() - backend.destroyed(), kRound + bound);
}

}  // namespace
}  // namespace evpool
