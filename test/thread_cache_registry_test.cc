// ThreadCacheRegistry: a cache leaves the registry (closed with the pool, or collected after its
// thread exited) before it is let go, so that a fork() child, which walks the list as fork() left
// it, never meets a freed cache; and its lease count is retired before it leaves, so that such a
// child counts those leases twice rather than never. Driven through a fake cache that, when let
// go, looks at the registry as a child forked at that instant would.
#include "evpool/detail/thread_cache_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace evpool::detail {
namespace {

struct FakeCache;
struct FakePolicy {
  struct fence {
    static void purger_fence() noexcept {}
  };
  static void spin_wait() noexcept {}
};
using Registry = ThreadCacheRegistry<FakeCache, FakePolicy>;

struct FakeCache {
  enum Bypass : std::uint32_t { kOpen = 0, kDraining = 1, kClosed = 2 };

  Registry *registry = nullptr;
  std::int64_t leases = 0;
  bool is_abandoned = false;
  Bypass state = kOpen;
  bool waited = false;  // the purger waited for the owner's call in progress
  // What let_go saw: whether the registry still reached this cache, and the retired leases.
  bool let_go_called = false;
  bool reachable_when_let_go = false;
  std::int64_t retired_when_let_go = -1;
  std::atomic<FakeCache *> next{nullptr};

  void purger_request(Bypass to) noexcept { state = to; }
  void purger_wait_until_idle() noexcept { waited = true; }
  void purger_reopen() noexcept { state = kOpen; }
  std::int64_t purger_leases() const noexcept { return leases; }
  bool abandoned() const noexcept { return is_abandoned; }
  std::atomic<FakeCache *> &registry_next() noexcept { return next; }

  void let_go() noexcept {
    let_go_called = true;
    retired_when_let_go = registry->retired_leases();
    // Walks the list as a fork() child would at this instant (the caches' states are the fake's).
    registry->quiesce(state, [&](FakeCache &cache) { reachable_when_let_go |= &cache == this; });
  }
};

struct ThreeCaches {
  Registry registry;
  std::vector<FakeCache> caches = std::vector<FakeCache>(3);
  ThreeCaches() {
    auto lock = registry.lock();
    for (int i = 0; i < 3; ++i) {
      caches[i].registry = &registry;
      caches[i].leases = i + 1;
      EXPECT_TRUE(registry.add(caches[i]));
    }
  }
};

TEST(ThreadCacheRegistry, CloseUnlinksEachCacheAndRetiresItsLeasesBeforeLettingItGo) {
  ThreeCaches fixture;
  auto lock = fixture.registry.lock();
  int visited = 0;
  fixture.registry.close([&](FakeCache &cache) {
    EXPECT_EQ(cache.state, FakeCache::kClosed) << "visited before it was closed";
    EXPECT_TRUE(cache.waited) << "visited without waiting for its owner's call in progress";
    ++visited;
  });
  EXPECT_EQ(visited, 3);
  std::int64_t retired_so_far = 0;
  for (const FakeCache &cache : fixture.caches) {
    ASSERT_TRUE(cache.let_go_called);
    EXPECT_FALSE(cache.reachable_when_let_go) << "a cache was let go while the registry still reached it";
    EXPECT_GE(cache.retired_when_let_go, cache.leases) << "a cache was let go before its leases were retired";
    retired_so_far += cache.leases;
  }
  EXPECT_EQ(fixture.registry.retired_leases(), retired_so_far);
  FakeCache late;
  EXPECT_FALSE(fixture.registry.add(late)) << "a closed registry took a new cache";
}

TEST(ThreadCacheRegistry, QuiesceWaitsForEachCacheBeforeVisitingItAndReopenAllOpensThem) {
  ThreeCaches fixture;
  auto lock = fixture.registry.lock();
  int visited = 0;
  fixture.registry.quiesce(FakeCache::kDraining, [&](FakeCache &cache) {
    EXPECT_EQ(cache.state, FakeCache::kDraining);
    EXPECT_TRUE(cache.waited) << "visited without waiting for its owner's call in progress";
    ++visited;
  });
  EXPECT_EQ(visited, 3);
  fixture.registry.reopen_all();
  for (const FakeCache &cache : fixture.caches) EXPECT_EQ(cache.state, FakeCache::kOpen);
}

TEST(ThreadCacheRegistry, CollectionTakesOnlyAbandonedCachesAndUnlinksEachBeforeLettingItGo) {
  ThreeCaches fixture;
  fixture.caches[1].is_abandoned = true;
  auto lock = fixture.registry.lock();
  int visited = 0;
  fixture.registry.collect_abandoned([&](FakeCache &cache) {
    EXPECT_EQ(&cache, &fixture.caches[1]);
    ++visited;
  });
  EXPECT_EQ(visited, 1);
  EXPECT_FALSE(fixture.caches[0].let_go_called);
  EXPECT_FALSE(fixture.caches[2].let_go_called);
  ASSERT_TRUE(fixture.caches[1].let_go_called);
  EXPECT_FALSE(fixture.caches[1].reachable_when_let_go);
  EXPECT_EQ(fixture.caches[1].retired_when_let_go, 2);
  EXPECT_EQ(fixture.registry.retired_leases(), 2);
}

}  // namespace
}  // namespace evpool::detail
