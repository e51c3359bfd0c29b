// A stream handed back known idle (UniqueLease::reset_known_idle, which
// CUDAStreamLease::synchronize_and_reset uses): this thread's next Get takes it without a query,
// and nothing else does. Every other way a handle reaches the top of the thread's loaded magazine
// (a Put, a lease or a shared lease ending, a refill after a flush or a purge) makes the next Get
// ask again: each test below hands the top a busy stream that way, and a Get that trusted a stale
// mark would hand it out. On the host seam (HostStreamBackend), whose queries are counted.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "support/host_stream_backend.h"
#include "pool_policies.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Stream = HostStreamBackend::owner_type;
using Token = HostStreamBackend::handle_type;

class KnownIdleStreams : public testing::Test {
 protected:
  // A lease whose stream goes back known idle; returns the stream's token.
  Token hand_back_known_idle() {
    auto lease = pool.Lease(0);
    const Token token = lease.get();
    lease.reset_known_idle();
    return token;
  }
  // The next Get must not be `busy`, and must have asked whatever it hands out.
  void expect_next_get_asks_and_passes_over(Token busy) {
    auto lease = pool.Lease(0);
    EXPECT_NE(lease.get(), busy) << "a busy stream handed out on a stale known-idle mark";
    EXPECT_TRUE(backend.asked_idle_since_busy(lease.get()));
  }

  HostStreamBackend backend{1};
  BasicHandlePool<HostStreamBackend> pool{backend};
};

TEST_F(KnownIdleStreams, TheNextGetTakesItWithoutAQueryAndTheOneAfterAsksAgain) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  const Token idle = hand_back_known_idle();
  const std::uint64_t queries = backend.queries();
  {
    auto lease = pool.Lease(0);
    EXPECT_EQ(lease.get(), idle);
    EXPECT_EQ(backend.queries(), queries) << "a stream handed back known idle was asked";
  }  // an ordinary hand-back
  auto again = pool.Lease(0);
  EXPECT_EQ(again.get(), idle);
  EXPECT_EQ(backend.queries(), queries + 1) << "an ordinary hand-back is asked";
}

// The mark speaks for the top stream alone: the Get after it asks the one beneath.
TEST_F(KnownIdleStreams, OnlyTheStreamOnTopIsTrusted) {
  Token beneath;
  {
    auto lease = pool.Lease(0);
    beneath = lease.get();
    auto other = pool.Lease(0);  // a second stream, handed back known idle on top of the first
    backend.make_busy(beneath, 1000);
    lease.reset();
    other.reset_known_idle();
  }
  auto top = pool.Lease(0);
  expect_next_get_asks_and_passes_over(beneath);
}

// In the three below, the busy stream is taken before the known-idle one goes back, and goes back
// on top of it.
TEST_F(KnownIdleStreams, APutOnTopIsAsked) {
  Stream busy = pool.Get(0);
  (void)hand_back_known_idle();
  const Token token = busy.get();
  backend.make_busy(token, 1000);
  pool.Put(std::move(busy));
  expect_next_get_asks_and_passes_over(token);
}

TEST_F(KnownIdleStreams, ALeaseEndingOnTopIsAsked) {
  auto lease = pool.Lease(0);
  (void)hand_back_known_idle();
  const Token token = lease.get();
  backend.make_busy(token, 1000);
  lease.reset();
  expect_next_get_asks_and_passes_over(token);
}

TEST_F(KnownIdleStreams, ASharedLeaseEndingOnTopIsAsked) {
  auto shared = pool.LeaseShared(0);
  (void)hand_back_known_idle();
  const Token token = shared.get();
  backend.make_busy(token, 1000);
  shared.reset();
  expect_next_get_asks_and_passes_over(token);
}

// A lease that ends on a full loaded magazine takes end_lease_slow (room made, then filed): its
// mark is the lease's own, so an ordinary end there is asked.
TEST_F(KnownIdleStreams, ALeaseEndingOnAFullMagazineIsAsked) {
  std::vector<decltype(pool.Lease(0))> leases;
  for (unsigned i = 0; i <= DefaultPoolPolicy::cache_start_capacity; ++i) leases.push_back(pool.Lease(0));
  auto last = std::move(leases.back());
  leases.pop_back();
  for (std::size_t i = 0; i + 1 < leases.size(); ++i) leases[i].reset();
  leases.back().reset_known_idle();  // the magazine's last place, marked: it is full
  const Token token = last.get();
  backend.make_busy(token, 1000);
  last.reset();  // no room: the slow way
  expect_next_get_asks_and_passes_over(token);
}

// The stream leaves the cache with a flush, a holder in between leaves work on it (here the test
// stands in for that holder), and a refill brings it back to the top.
TEST_F(KnownIdleStreams, AStreamThatLeftTheCacheAndCameBackIsAsked) {
  const Token token = hand_back_known_idle();
  pool.FlushThreadCache();
  backend.make_busy(token, 1000);
  expect_next_get_asks_and_passes_over(token);
}

// The same through a purger, which empties the cache under the owner's feet.
TEST_F(KnownIdleStreams, AStreamThatATrimMovedToTheDepotIsAsked) {
  const Token token = hand_back_known_idle();
  pool.Trim(64);
  backend.make_busy(token, 1000);
  expect_next_get_asks_and_passes_over(token);
}

// Without caches (checked mode, NoCachePolicy) there is no top to trust: every Get asks.
TEST(KnownIdleStreamsUncached, EveryGetAsks) {
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend, NoCachePolicy<>> pool(backend);
  pool.Lease(0).reset_known_idle();
  const std::uint64_t queries = backend.queries();
  auto lease = pool.Lease(0);
  EXPECT_EQ(backend.queries(), queries + 1);
}

}  // namespace
}  // namespace evpool
