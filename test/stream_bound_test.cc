// The bound on what a pool of busy handles creates (docs/streams.md, "The bound"), through
// HostStreamBackend on its tick clock: a stream handed back with work lasting L ticks is busy for
// the next L ticks, and the tests tick once per Get, as time passes between a scheduler's leases.
// A Get creates only after every handle of the depot, those set aside busy and the retired were
// found busy, and the few of its cache it asks, so one thread that hands back every stream busy for
// L ticks needs at most L + 2 streams, and the two magazines of its cache, however long it runs.
// And the cap.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <stdexcept>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/pool_cap.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"
#include "support/other_thread.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Stream = HostStreamBackend::owner_type;
using Token = HostStreamBackend::handle_type;
using Clock = HostStreamBackend::Clock;

template <class Policy>
class StreamBound : public testing::Test {
 protected:
  using Pool = BasicHandlePool<HostStreamBackend, Policy>;
};
TYPED_TEST_SUITE(StreamBound, test::StreamPolicies, test::PolicyName);

// The pattern of docs/streams.md: lease, enqueue work, hand back busy, again; the work in flight
// is just over one magazine, two magazines, many. Creation levels off at the work in flight.
TYPED_TEST(StreamBound, OneThreadHandingBackBusyNeedsOnlyItsWorkInFlight) {
  for (const std::uint32_t work : {4u, 31u, 33u, 64u, 128u, 256u}) {
    HostStreamBackend backend(1, Clock::kTicks);
    typename TestFixture::Pool pool(backend);
    std::uint64_t created_early = 0;
    for (int get = 1; get <= 12000; ++get) {
      Stream stream = pool.Get(0);
      ASSERT_TRUE(backend.asked_idle_since_busy(stream.get())) << "work " << work << ", Get " << get;
      backend.make_busy(stream.get(), work);
      pool.Put(std::move(stream));
      backend.advance();
      if (get == 4000) created_early = backend.created();
    }
    EXPECT_LE(backend.created(), work + 2 + test::kPerThreadCacheBound<TypeParam>) << "work lasting " << work;
    EXPECT_EQ(backend.created(), created_early) << "work lasting " << work << ": creation did not level off";
  }
}

// A lease ending with its stream busy follows the same path as a Put (the hand-back).
TYPED_TEST(StreamBound, LeasesHandedBackBusyNeedOnlyTheirWorkInFlight) {
  constexpr std::uint32_t kWork = 100;
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend);
  for (int get = 0; get < 4000; ++get) {
    auto lease = get % 2 == 0 ? pool.Lease(0) : decltype(pool.Lease(0))();
    auto shared = get % 2 == 1 ? pool.LeaseShared(0) : decltype(pool.LeaseShared(0))();
    const Token token = lease ? lease.get() : shared.get();
    ASSERT_TRUE(backend.asked_idle_since_busy(token)) << "Get " << get;
    backend.make_busy(token, kWork);
    backend.advance();
  }
  EXPECT_LE(backend.created(), kWork + 2 + test::kPerThreadCacheBound<TypeParam>);
}

// One thread leases and another hands back: the streams go through the second thread's cache
// and the depot, and the first takes them from the depot once their work is done.
TYPED_TEST(StreamBound, StreamsHandedBackByAnotherThreadAreFoundAgain) {
  for (const std::uint32_t work : {8u, 64u, 200u}) {
    HostStreamBackend backend(1, Clock::kTicks);
    typename TestFixture::Pool pool(backend);
    std::deque<Stream> in_flight;  // from the leasing thread to the handing-back one
    std::uint64_t created_early = 0;
    // The two threads' turns, interleaved on one thread of the test: which thread calls is what
    // decides whose cache a stream goes to, so each runs on a thread of its own.
    test::OtherThread handing_back;
    for (int get = 1; get <= 6000; ++get) {
      Stream stream = pool.Get(0);
      ASSERT_TRUE(backend.asked_idle_since_busy(stream.get())) << "work " << work << ", Get " << get;
      backend.make_busy(stream.get(), work);
      in_flight.push_back(std::move(stream));
      if (in_flight.size() == 16) {
        handing_back.run([&] {
          for (Stream &handed : in_flight) pool.Put(std::move(handed));
        });
        in_flight.clear();
      }
      backend.advance();
      if (get == 3000) created_early = backend.created();
    }
    // The handing-back thread's cache holds up to two magazines, which the leasing thread cannot
    // reach: they add to what the work in flight needs.
    const std::uint64_t cache_bound = test::kPerThreadCacheBound<TypeParam>;
    EXPECT_LE(backend.created(), work + 16 + cache_bound + 2) << "work lasting " << work;
    EXPECT_EQ(backend.created(), created_early) << "work lasting " << work << ": creation did not level off";
  }
}

// An idle stream below busy ones is found: the busy ones met on the way are set aside.
TYPED_TEST(StreamBound, AnIdleStreamBelowBusyOnesIsFound) {
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend);
  std::vector<Stream> streams;
  for (int i = 0; i < 100; ++i) streams.push_back(pool.Get(0));
  const Token idle = streams.front().get();
  for (Stream &stream : streams) {
    if (stream.get() != idle) backend.make_busy(stream.get(), 1000);
    pool.Put(std::move(stream));  // the idle one first: at the bottom
  }
  pool.FlushThreadCache();  // every stream to the depot: the idle one under 99 busy ones
  Stream got = pool.Get(0);
  EXPECT_EQ(got.get(), idle);
  EXPECT_EQ(backend.created(), 100u) << "a Get created while an idle stream was in the pool";
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.busy + figures.idle, 99u) << "every busy stream is still the pool's";
}

// Busy streams set aside are asked again by the next Get that finds nothing else: the one whose
// work completed first is handed out, and nothing is created.
TYPED_TEST(StreamBound, StreamsSetAsideAreHandedOutOnceTheirWorkIsDone) {
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend);
  std::vector<Stream> streams;
  for (int i = 0; i < 40; ++i) streams.push_back(pool.Get(0));
  for (std::size_t i = 0; i < streams.size(); ++i) {
    backend.make_busy(streams[i].get(), i == 7 ? 5 : 1000);
    pool.Put(std::move(streams[i]));
  }
  pool.FlushThreadCache();
  std::vector<Stream> held;
  held.push_back(pool.Get(0));  // every one busy: one is created, the 40 are set aside
  EXPECT_EQ(backend.created(), 41u);
  DeviceStats figures = pool.stats().total();
  EXPECT_GT(figures.busy, 0u) << "the busy streams the Get met in the depot are set aside";
  EXPECT_EQ(pool.busy_handles(0), figures.busy);
  EXPECT_EQ(figures.busy + figures.idle, 40u);
  EXPECT_THROW(pool.busy_handles(1), std::out_of_range);
  backend.advance(10);
  pool.FlushThreadCache();  // what the first Get took into the cache goes back to the depot
  held.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 41u) << "the stream whose work ended was not found among those set aside";
  EXPECT_TRUE(backend.asked_idle_since_busy(held.back().get()));
  figures = pool.stats().total();
  EXPECT_EQ(figures.busy + figures.idle, 39u);
}

// Streams set aside in a burst go back under the idle limit once their work is done, also when
// no Get misses the depot to sweep them: Gets off their fast path ask them a magazine at a time.
TYPED_TEST(StreamBound, StreamsSetAsideGoBackUnderTheIdleLimitOnceIdle) {
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, 4);
  std::vector<Stream> burst;
  for (int i = 0; i < 300; ++i) burst.push_back(pool.Get(0));
  for (Stream &stream : burst) {
    backend.make_busy(stream.get(), 10);
    pool.Put(std::move(stream));
  }
  pool.FlushThreadCache();
  { Stream one = pool.Get(0); }  // sets the busy ones aside
  ASSERT_GT(pool.stats().total().busy, 0u);
  backend.advance(20);              // every one's work is done
  for (int i = 0; i < 2000; ++i) {  // ordinary work, served by the cache and the depot
    Stream stream = pool.Get(0);
    pool.Put(std::move(stream));
    pool.FlushThreadCache();  // every Get goes off its fast path
  }
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.busy, 0u) << "streams stayed set aside after their work was done";
  EXPECT_LE(figures.idle, 4u + test::kPerThreadCacheBound<TypeParam>);
}

// ---- The cap ------------------------------------------------------------------------------------

TYPED_TEST(StreamBound, ACapOfZeroIsRefused) {
  HostStreamBackend backend(1);
  EXPECT_THROW(typename TestFixture::Pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle,
                                          Checks::kDefault, 0),
               std::invalid_argument);
}

// At the cap, a Get waits for a busy stream of the pool's to complete (here the Get's own asking
// is the clock) and creates nothing.
TYPED_TEST(StreamBound, AGetAtTheCapWaitsForABusyStream) {
  HostStreamBackend backend(1);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, 3);
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(pool.Get(0));
  for (Stream &stream : streams) {
    backend.make_busy(stream.get(), 50);
    pool.Put(std::move(stream));
  }
  Stream got = pool.Get(0);
  EXPECT_TRUE(backend.asked_idle_since_busy(got.get()));
  EXPECT_EQ(backend.created(), 3u);
}

// At the cap with every stream out, a Get waits, as on a semaphore, until one is handed back. A
// stream let go of (release()) no longer counts; it comes back only as a foreign one, which takes
// a place, and is refused at the cap with the caller still owning it.
TYPED_TEST(StreamBound, AGetAtTheCapWithEveryStreamOutWaitsForAHandBack) {
  HostStreamBackend backend(1);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, 2);
  auto first = pool.Lease(0);
  auto second = pool.Lease(0);
  const Token handed_back = second.get();
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    second.reset();
  });
  auto third = pool.Lease(0);  // waits for `second`
  holder.join();
  EXPECT_EQ(third.get(), handed_back);
  EXPECT_EQ(backend.created(), 2u);
  Stream let_go = first.release();  // no longer the pool's
  auto fourth = pool.Lease(0);
  EXPECT_EQ(backend.created(), 3u);
  EXPECT_THROW(pool.PutForeign(std::move(let_go)), CapReachedError);  // 2 exist through the pool
  EXPECT_TRUE(static_cast<bool>(let_go)) << "the caller still owns the stream";
  third.reset();
  auto fifth = pool.Lease(0);
  EXPECT_THROW((void)pool.LeaseWithin(std::chrono::nanoseconds(0), 0), CapReachedError);
  EXPECT_EQ(backend.created(), 3u) << "the idle ones are reused";
}

// A Get (not a lease) counts against the cap until a Put brings its handle back.
TYPED_TEST(StreamBound, AGotHandleCountsAgainstTheCapUntilPutBack) {
  HostStreamBackend backend(1);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, 1);
  Stream got = pool.Get(0);
  EXPECT_THROW((void)pool.LeaseWithin(std::chrono::nanoseconds(0), 0), CapReachedError);
  EXPECT_EQ(backend.created(), 1u);
  pool.Put(std::move(got));
  auto again = pool.Lease(0);
  EXPECT_EQ(backend.created(), 1u);
}

// Reserve stays within the cap too.
TYPED_TEST(StreamBound, ReserveStaysWithinTheCap) {
  HostStreamBackend backend(1);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, 2);
  pool.Reserve(0, 10);
  EXPECT_EQ(backend.created(), 2u);
}

// At the cap, idle streams in another thread's cache are brought to the depot rather than waited
// for or thrown over.
TYPED_TEST(StreamBound, AGetAtTheCapFindsIdleStreamsInOtherThreadsCaches) {
  HostStreamBackend backend(1);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, 4);
  test::OtherThread other;
  other.run([&] {
    std::vector<Stream> streams;
    for (int i = 0; i < 4; ++i) streams.push_back(pool.Get(0));
    for (Stream &stream : streams) pool.Put(std::move(stream));  // into that thread's cache
  });
  std::vector<Stream> got;
  for (int i = 0; i < 4; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 4u);
}

}  // namespace
}  // namespace evpool
