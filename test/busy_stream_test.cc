// The core's stream paths, through HostStreamBackend: busy streams (work of their last holder
// still pending) are never handed out, what asking costs, and a bare stream's device asked of the
// stream. Both policies: with caches the check sits in the cache's fast path (take_and_exit, then
// take_older_or_bypass), without caches in the depot's way (take_idle_from_depot).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/pool_checks.h"
#include "pool_policies.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "support/host_stream_backend.h"
#include "tracked_backend.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Stream = HostStreamBackend::owner_type;
using Token = HostStreamBackend::handle_type;

template <class Policy>
class BusyStreams : public testing::Test {
 protected:
  using Pool = BasicHandlePool<HostStreamBackend, Policy>;
  HostStreamBackend backend{2};
  Pool pool{backend};

  // `count` streams of device 0, created now and put back idle, in order: the last is on top.
  std::vector<Token> idle_streams(std::size_t count) {
    std::vector<Stream> streams;
    for (std::size_t i = 0; i < count; ++i) streams.push_back(pool.Get(0));
    std::vector<Token> tokens;
    for (Stream &stream : streams) {
      tokens.push_back(stream.get());
      pool.Put(std::move(stream));
    }
    return tokens;
  }
};
TYPED_TEST_SUITE(BusyStreams, test::BothPolicies, test::PolicyName);

// DALI's GetNotBusy: a stream handed back with its work pending is not the next Get's.
TYPED_TEST(BusyStreams, AStreamPutBackBusyIsNotHandedOutWhileItIsBusy) {
  Stream stream = this->pool.Get(0);
  const Token busy = stream.get();
  this->backend.make_busy(busy, 1000);  // long work enqueued
  this->pool.Put(std::move(stream));
  for (int i = 0; i < 4; ++i) {
    Stream next = this->pool.Get(0);
    EXPECT_NE(next.get(), busy) << "Get " << i << " handed out a busy stream";
    EXPECT_TRUE(this->backend.asked_idle_since_busy(next.get()));
    this->pool.Put(std::move(next));
  }
  EXPECT_EQ(this->backend.created(), 2u) << "one new stream while the first is busy, reused after";
}

// DALI's GetSameNotBusy: an idle stream handed back is the next Get's, for one query.
TYPED_TEST(BusyStreams, AnIdleStreamHandedBackIsTheNextGetsForOneQuery) {
  const Token last = this->idle_streams(3).back();
  const std::uint64_t queries = this->backend.queries();
  Stream stream = this->pool.Get(0);
  EXPECT_EQ(stream.get(), last);
  EXPECT_EQ(this->backend.queries() - queries, 1u) << "the common case asks once";
  this->pool.Put(std::move(stream));
}

// Once its work is done, a stream that was busy is handed out again: nothing is set aside for
// good, and the pool does not grow with every busy Put.
TYPED_TEST(BusyStreams, AStreamWhoseWorkCompletedIsHandedOutAgain) {
  HostStreamBackend ticking(1, HostStreamBackend::Clock::kTicks);
  typename TestFixture::Pool pool(ticking);
  Stream stream = pool.Get(0);
  const Token token = stream.get();
  ticking.make_busy(token, 1);  // done once the clock has moved by more than 1
  pool.Put(std::move(stream));
  Stream other = pool.Get(0);  // asks `token` (busy), and creates
  EXPECT_NE(other.get(), token);
  ticking.advance(2);
  Stream again = pool.Get(0);
  EXPECT_EQ(again.get(), token) << "the stream whose work completed";
  EXPECT_EQ(ticking.created(), 2u);
}

TYPED_TEST(BusyStreams, ABusyStreamInALeaseIsNotHandedOutEither) {
  Token busy;
  {
    auto lease = this->pool.Lease(0);
    busy = lease.get();
    this->backend.make_busy(busy, 1000);
  }
  auto unique = this->pool.Lease(0);
  auto shared = this->pool.LeaseShared(0);
  EXPECT_NE(unique.get(), busy);
  EXPECT_NE(shared.get(), busy);
}

// A bare stream (adopted, no device recorded) is filed under the device it tells, whatever
// device is current; a device_id that contradicts it is refused, in a message about a stream,
// and the caller keeps it.
TYPED_TEST(BusyStreams, ABareStreamIsFiledUnderTheDeviceItTells) {
  const Token token = this->pool.Get(1).release();
  this->backend.set_current_device(0);
  this->pool.Put(this->backend.adopt(token, -1));
  Stream refused = this->backend.adopt(this->pool.Get(1).release(), -1);
  try {
    this->pool.Put(std::move(refused), 0);
    ADD_FAILURE() << "a Put under a device the stream contradicts was accepted";
  } catch (const std::invalid_argument &error) {
    EXPECT_STREQ(error.what(),
                 "evpool: Put of a stream of device 1 under device 0; the caller still owns the stream");
  }
  EXPECT_TRUE(refused) << "the caller still owns a refused stream";
  this->pool.Put(std::move(refused), 1);
  std::vector<Stream> device_one;
  for (int i = 0; i < 2; ++i) device_one.push_back(this->pool.Get(1));
  EXPECT_EQ(this->backend.created(), 2u) << "both bare streams went back to device 1";
  EXPECT_TRUE(device_one[0].get() == token || device_one[1].get() == token);
}

// The cache's order: a busy newest stream makes the Get take the oldest of the loaded magazine,
// and the busy one stays on top; two queries, no stream created.
TEST(BusyStreamsCached, ABusyNewestStreamIsPassedOverForTheOldestOfTheMagazine) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend> pool(backend);
  std::vector<Stream> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(pool.Get(0));
  const Token oldest = streams.front().get(), newest = streams.back().get();
  for (Stream &stream : streams) pool.Put(std::move(stream));
  backend.make_busy(newest, 1000);
  const std::uint64_t queries = backend.queries();
  Stream got = pool.Get(0);
  EXPECT_EQ(got.get(), oldest);
  EXPECT_EQ(backend.queries() - queries, 2u);
  EXPECT_EQ(backend.created(), 4u);
  // The busy one is passed over each time: the next Gets take the others, then a new stream.
  std::vector<Stream> rest;
  for (int i = 0; i < 2; ++i) rest.push_back(pool.Get(0));
  for (const Stream &stream : rest) EXPECT_NE(stream.get(), newest);
  Stream fresh = pool.Get(0);
  EXPECT_NE(fresh.get(), newest);
  EXPECT_EQ(backend.created(), 5u);
}

// A thread that hands each stream back with work still queued for a while (here: busy for the
// next 6 queries, a few Gets) needs only as many streams as it has work in flight: Gets ask the
// stream handed back longest ago in the cache, and the few newest in the depot. With the cache's
// busy stream swapped to the bottom instead, every Get created once work outlasted two Gets.
// (Work that outlasts a magazine's worth of Gets makes Gets create: docs/streams.md, Limits.)
TYPED_TEST(BusyStreams, AThreadHandingStreamsBackBusyNeedsOnlyWhatItHasInFlight) {
  for (int cycle = 0; cycle < 1000; ++cycle) {
    Stream stream = this->pool.Get(0);
    ASSERT_TRUE(this->backend.asked_idle_since_busy(stream.get())) << "cycle " << cycle;
    this->backend.make_busy(stream.get(), 6);
    this->pool.Put(std::move(stream));
  }
  EXPECT_LE(this->backend.created(), 8u);
}

// Streams retired over the idle limit are asked before they are handed out again.
TEST(BusyStreamsUncached, ARetiredStreamIsAskedBeforeItIsHandedOut) {
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend, NoCachePolicy<>> pool(backend, HostStreamBackend::kDefaultOptions, 1);
  std::vector<Stream> streams;
  for (int i = 0; i < 64; ++i) streams.push_back(pool.Get(0));
  for (Stream &stream : streams) {
    backend.make_busy(stream.get(), 1000);
    pool.Put(std::move(stream));  // one stays idle in the depot, the others are retired
  }
  ASSERT_GT(pool.retired_handles(0), 32u);
  for (int i = 0; i < 8; ++i) {
    Stream got = pool.Get(0);
    EXPECT_TRUE(backend.asked_idle_since_busy(got.get())) << "Get " << i << " handed out a busy stream";
    (void)got.release();  // kept out: each Get must find another
  }
}

// A lease that begins on the way past a busy stream is counted as every lease is: the pool's state
// lives until it ends.
TEST(BusyStreamsCached, ALeaseBegunPastABusyStreamKeepsThePoolsStateAlive) {
  HostStreamBackend counters(1);
  test::Tracked<HostStreamBackend> tracked(counters);
  const std::weak_ptr<const int> core = tracked.watch();
  std::optional<BasicHandlePool<test::Tracked<HostStreamBackend>>> pool(std::in_place, std::move(tracked));
  std::vector<Stream> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(pool->Get(0));
  const Token newest = streams.back().get();
  for (Stream &stream : streams) pool->Put(std::move(stream));
  counters.make_busy(newest, 1000);
  auto lease = pool->Lease(0);  // past the busy newest, to the oldest
  ASSERT_NE(lease.get(), newest);
  pool.reset();
  EXPECT_FALSE(core.expired()) << "the lease's pool state ended before the lease";
  lease.reset();
  run_deferred_work();
  EXPECT_TRUE(core.expired()) << "the last lease did not end the pool's state";
}

// A shared lease whose Get fails past a busy stream gives its control block back (a leak shows
// under the ASan build) and leaves the pool as it was.
TEST(BusyStreamsCached, ASharedLeaseWhoseCreateFailsPastABusyStreamHoldsNothing) {
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend> pool(backend);
  {
    auto warm = pool.LeaseShared(0);  // the thread's cache keeps a spare block
    backend.make_busy(warm.get(), 1000);
  }
  backend.inject_create_fault([](std::uint64_t, int) { return true; });
  EXPECT_THROW((void)pool.LeaseShared(0), HostBackendFault);
  backend.inject_create_fault({});
  const DeviceStats figures = pool.stats().total();
  // Idle on top of the cache; or set aside as busy where a checked pool, which keeps no cache,
  // found it busy in the depot.
  EXPECT_EQ(figures.idle + figures.busy, 1u) << "the busy stream stays in the pool";
  EXPECT_EQ(figures.outstanding, 0);
}

TEST(BusyStreamsChecked, CheckedModeRefusesADoublePutOfAStream) {
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend> pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  const Token token = pool.Get(0).release();
  pool.Put(backend.adopt(token, 0));
  Stream duplicate = backend.adopt(token, 0);
  EXPECT_THROW(pool.Put(std::move(duplicate)), DoublePutError);
  EXPECT_FALSE(duplicate);
}

}  // namespace
}  // namespace evpool
