// Node allocation failure: Put must throw std::bad_alloc before taking ownership, and the pool must
// stay consistent, with per-thread caches on and off. A completion queue's poller that cannot file
// a request keeps it, in order, and files it once memory is back. The global operator new of this
// test binary fails on demand.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_completion_queue.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/depot_stripes.h"
#include "support/host_completion_backend.h"
#include "support/host_completion_fixture.h"

namespace {
thread_local int allocations_until_failure = -1;  // -1: never fail
// A thread that opted in (a completion queue's poller thread, from a callback) fails every
// allocation while `opted_in_threads_fail` is set. Relaxed: a switch the test flips and polls; the
// failures it counts need no order with anything else.
thread_local bool opted_in = false;
std::atomic<bool> opted_in_threads_fail{false};
std::atomic<int> opted_in_failures{0};
// Sized deletes of this size are counted (0: none): a test watches the pool delete its blocks.
std::atomic<std::size_t> watched_delete_size{0};
std::atomic<int> watched_deletes{0};
void count_delete(std::size_t size) noexcept {
  if (size != 0 && size == watched_delete_size.load(std::memory_order_relaxed))
    watched_deletes.fetch_add(1, std::memory_order_relaxed);
}

void *allocate(std::size_t size, std::size_t alignment) {
  if (opted_in && opted_in_threads_fail.load(std::memory_order_relaxed)) {
    opted_in_failures.fetch_add(1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
  if (allocations_until_failure == 0) {
    allocations_until_failure = -1;
    throw std::bad_alloc();
  }
  if (allocations_until_failure > 0) --allocations_until_failure;
  const std::size_t rounded = (size + alignment - 1) / alignment * alignment;
  void *memory = alignment <= alignof(std::max_align_t)
                     ? std::malloc(size ? size : 1)
                     : std::aligned_alloc(alignment, rounded ? rounded : alignment);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}

// How many allocations `run` makes on this thread; none fails.
template <class Run>
int allocations_during(Run &&run) {
  constexpr int kBudget = 1 << 20;
  allocations_until_failure = kBudget;
  run();
  const int made = kBudget - allocations_until_failure;
  allocations_until_failure = -1;
  return made;
}

// How many allocations this thread makes beginning `count` shared leases of device 0 into `leases`.
template <class Pool, class Leases>
int allocations_beginning(Pool &pool, Leases &leases, int count) {
  return allocations_during([&] {
    for (int i = 0; i < count; ++i) leases.push_back(pool.LeaseShared(0));
  });
}
}  // namespace

void *operator new(std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void *operator new[](std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void *operator new(std::size_t size, std::align_val_t a) {
  return allocate(size, static_cast<std::size_t>(a));
}
void *operator new[](std::size_t size, std::align_val_t a) {
  return allocate(size, static_cast<std::size_t>(a));
}
// The nothrow forms fail as the others do, and allocate from the same heap, which the replaced
// deletes below free into.
void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
  try {
    return allocate(size, alignof(std::max_align_t));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void *operator new[](std::size_t size, const std::nothrow_t &tag) noexcept { return operator new(size, tag); }
void *operator new(std::size_t size, std::align_val_t a, const std::nothrow_t &) noexcept {
  try {
    return allocate(size, static_cast<std::size_t>(a));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void *operator new[](std::size_t size, std::align_val_t a, const std::nothrow_t &tag) noexcept {
  return operator new(size, a, tag);
}
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t size) noexcept {
  count_delete(size);
  std::free(p);
}
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t size, std::align_val_t) noexcept {
  count_delete(size);
  std::free(p);
}
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace evpool {
namespace {

using Event = HostBackend::Event;
using test::BothPolicies;
using test::kCached;
using test::PolicyName;

template <class Policy>
using AllocationFailure = test::HostPoolTest<Policy>;
TYPED_TEST_SUITE(AllocationFailure, BothPolicies, PolicyName);

TYPED_TEST(AllocationFailure, PutThatCannotAllocateANodeThrowsAndTheCallerKeepsItsEvent) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  // The first chunk of the arena holds 64 nodes. Without caches a node holds one event, so the
  // 65th Put needs a second chunk. With caches a node is a magazine: the thread's cache keeps two
  // and hands each further full one to the depot, so 64 nodes hold at most 64 x capacity events
  // (fewer while the magazines grow), and the Put after them needs the second chunk.
  constexpr std::size_t kPerNode = kCached<TypeParam> ? TypeParam::cache_capacity : 1;
  constexpr std::size_t kFitting = 64 * kPerNode;
  std::vector<Event> events;
  for (std::size_t i = 0; i < kFitting + 10; ++i) events.push_back(pool.Get(0));
  // The first Put allocates the first chunk; this thread's cache was registered by the Gets, so
  // from here on a Put allocates only when it needs a new chunk.
  pool.Put(std::move(events[0]));
  allocations_until_failure = 0;
  std::size_t put = 1;
  for (; put < events.size(); ++put) {
    Event &event = events[put];
    const auto token = event.get();
    const std::size_t nodes = pool.node_count();
    try {
      pool.Put(std::move(event));
    } catch (const std::bad_alloc &) {
      EXPECT_EQ(event.get(), token) << "the caller must still own the event";
      EXPECT_EQ(pool.node_count(), nodes) << "a failed allocation claims no node";
      break;
    }
  }
  allocations_until_failure = -1;
  ASSERT_LT(put, events.size()) << "some Put must need a second chunk";
  EXPECT_EQ(pool.node_count(), 64u) << "the Put that needs a second chunk must be the first to throw";
  if constexpr (!kCached<TypeParam>) {
    EXPECT_EQ(put, kFitting);
  }

  // The pool still works: the same Put now succeeds, and every event comes back out.
  for (; put < events.size(); ++put) pool.Put(std::move(events[put]));
  std::vector<Event> again;
  for (std::size_t i = 0; i < events.size(); ++i) again.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), events.size());
  again.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TYPED_TEST(AllocationFailure, AFailedFirstNodeLeavesAnEmptyWorkingPool) {
  HostBackend backend(2);
  typename TestFixture::Pool pool(backend);
  Event event = pool.Get(1);  // registers this thread's cache (with caches)
  allocations_until_failure = 0;
  EXPECT_THROW(pool.Put(std::move(event)), std::bad_alloc);
  allocations_until_failure = -1;
  EXPECT_TRUE(event);
  // Purge waits for the call in progress on each cache: it returns only if the failed Put ended
  // its call on this thread's cache (with nothing idle, it destroys nothing).
  pool.Purge();
  pool.Put(std::move(event));
  EXPECT_EQ(pool.Get(1).device_id(), 1);
  EXPECT_EQ(backend.created(), 1u);
}

TYPED_TEST(AllocationFailure, AThreadWhoseCacheCannotBeAllocatedUsesTheDepot) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  pool.Reserve(0, 3);
  std::thread([&] {
    // The first call of this thread on the pool would register its cache: that allocation fails,
    // and the call goes to the depot instead.
    allocations_until_failure = 0;
    Event event = pool.Get(0);
    allocations_until_failure = -1;
    EXPECT_TRUE(event);
    EXPECT_EQ(backend.created(), 3u) << "the Get hit the depot";
    pool.Put(std::move(event));
    for (int i = 0; i < 3; ++i) pool.Put(pool.Get(0));
  }).join();
  std::vector<Event> got;
  for (int i = 0; i < 3; ++i) got.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 3u);
  got.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// A shared lease's control block is recycled through the thread's cache (shared_lease_block.h):
// once a thread has ended one, its next one allocates nothing. Without caches every lease
// allocates its block, and one that cannot holds no event. Two leases before the one that
// counts: the first begins and ends around the cache (the thread has none yet, then no
// magazine), the second takes the inlined way both to begin and to end.
TYPED_TEST(AllocationFailure, ASharedLeaseAllocatesNoBlockOnceItsThreadHasEndedOne) {
  HostBackend backend(1);
  typename TestFixture::Pool pool(backend);
  for (int warm = 0; warm < 2; ++warm) {
    auto lease = pool.LeaseShared(0);
    auto copy = lease;
  }
  allocations_until_failure = 0;
  if (test::caches_on<TypeParam>()) {
    auto lease = pool.LeaseShared(0);
    allocations_until_failure = -1;
    ASSERT_TRUE(lease);
    auto copy = lease;
    EXPECT_EQ(copy.use_count(), 2);
  } else {
    EXPECT_THROW(pool.LeaseShared(0), std::bad_alloc);
    allocations_until_failure = -1;
  }
  EXPECT_EQ(backend.created(), 1u) << "every lease had the one event";
  const DeviceStats figures = pool.stats().devices[0];
  EXPECT_EQ(figures.outstanding, 0);
  EXPECT_EQ(figures.idle, 1u);
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

// Shared leases that another thread ends (a completion thread) come back to the thread that began
// them through the pool's spare block depot (spare_block_depot.h): the ending thread hands each
// full stack of spare blocks over, and the rest when it exits, so the beginner's next leases
// allocate nothing. Purge deletes the depot's blocks: after it, the beginner allocates again.
// Fails if a full stack is deleted instead of handed over (the first round allocates), if the
// exiting thread keeps its last stack (the leases past 48 allocate), or if Purge keeps them.
TYPED_TEST(AllocationFailure, SharedLeasesEndedOnAnotherThreadComeBackWithoutAllocating) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend backend(1);
    typename TestFixture::Pool pool(backend);
    constexpr int kLeases = 64;  // four stacks of spare blocks
    std::vector<typename TestFixture::Pool::shared_lease> leases;
    leases.reserve(kLeases);
    const auto begin_here = [&] {
      for (int i = 0; i < kLeases; ++i) leases.push_back(pool.LeaseShared(0));
    };
    const auto end_there = [&] { std::thread([&] { leases.clear(); }).join(); };
    begin_here();  // allocates every block
    end_there();
    allocations_until_failure = 0;
    EXPECT_NO_THROW(begin_here()) << "a block was allocated: the ending thread's blocks did not come back";
    allocations_until_failure = -1;
    EXPECT_EQ(leases.size(), static_cast<std::size_t>(kLeases));
    end_there();
    pool.Purge();
    allocations_until_failure = 0;
    EXPECT_THROW(pool.LeaseShared(0), std::bad_alloc) << "Purge deletes the depot's blocks";
    allocations_until_failure = -1;
    EXPECT_EQ(backend.created(), static_cast<std::uint64_t>(kLeases));
    leases.clear();
  }
}

// A bundle's node goes back to the depot's empty stack when its blocks are taken
// (spare_block_depot.h), so a thread that keeps handing a full stack over and taking it back
// allocates nothing, however long it goes on: each round begins 17 shared leases (1 block from
// its stack, 16 from the bundle) and ends them (the 17th end hands the full stack over). Fails if
// take keeps the node (the hand-over after the first chunk's 64 nodes allocates), or if a bundle
// or a stack miscounts its blocks (a block goes missing, and a later lease allocates).
TYPED_TEST(AllocationFailure, HandOversReuseTheNodesOfTakenBundles) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend backend(1);
    typename TestFixture::Pool pool(backend);
    constexpr int kLeases = 17;  // one more than a cache's spare stack holds
    std::vector<typename TestFixture::Pool::shared_lease> leases;
    leases.reserve(kLeases);
    const auto round = [&] {
      for (int i = 0; i < kLeases; ++i) leases.push_back(pool.LeaseShared(0));
      leases.clear();
    };
    for (int warm = 0; warm < 2; ++warm) round();
    const int allocations = allocations_during([&] {
      for (int i = 0; i < 200; ++i) round();
    });
    EXPECT_EQ(allocations, 0) << "200 rounds of 17 shared leases allocated";
    EXPECT_EQ(backend.created(), static_cast<std::uint64_t>(kLeases));
  }
}

// In a pipeline the ending thread hands bundles to its home stripe (stripe 1 here) and the
// beginning one (home 0) takes them from there; each taken bundle's node goes back to the stripe
// it came from (spare_block_depot.h), where the ender looks for its next one. So once warm, the
// pipeline allocates nothing on either side: each round begins 64 shared leases on this thread and
// ends them on the other. Fails if a taken node goes to the taker's home stripe instead (the
// ender's stripe then runs out of nodes, and new ones come a chunk at a time).
TYPED_TEST(AllocationFailure, TakenBundlesNodesGoBackToTheirGiversStripe) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend backend(1);
    typename TestFixture::Pool pool(backend);
    constexpr int kLeases = 64, kWarmRounds = 2, kRounds = kWarmRounds + 100;
    std::vector<typename TestFixture::Pool::shared_lease> leases;
    leases.reserve(kLeases);
    testing_support::restart_depot_stripe_hints();  // this thread's home stripe 0, the ender's 1
    std::atomic<int> begun{0}, ended{0};            // rounds; release/acquire hand `leases` over
    int ender_allocations = 0;
    std::thread ender([&] {
      for (int round = 1; round <= kRounds; ++round) {
        while (begun.load(std::memory_order_acquire) < round) std::this_thread::yield();
        const int made = allocations_during([&] { leases.clear(); });
        if (round > kWarmRounds) ender_allocations += made;
        ended.store(round, std::memory_order_release);
      }
    });
    int beginner_allocations = 0;
    for (int round = 1; round <= kRounds; ++round) {
      const int made = allocations_beginning(pool, leases, kLeases);
      if (round > kWarmRounds) beginner_allocations += made;
      begun.store(round, std::memory_order_release);
      while (ended.load(std::memory_order_acquire) < round) std::this_thread::yield();
    }
    ender.join();
    EXPECT_EQ(beginner_allocations, 0) << "the beginning thread found too few blocks in the depot";
    EXPECT_EQ(ender_allocations, 0) << "the ending thread's stripe ran out of nodes for its bundles";
  }
}

// A hand-over that finds no memory for a bundle's node leaves the full stack with its thread and
// deletes only the block being ended (spare_block_depot.h, give); the thread's exit hands the
// stack over later, so the beginner's next 16 leases allocate nothing. Fails if the failed
// hand-over loses the stack (the 16 leases allocate; ASan also reports them leaked).
TYPED_TEST(AllocationFailure, AHandOverWithoutMemoryLeavesTheStackWithItsThread) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend backend(1);
    typename TestFixture::Pool pool(backend);
    constexpr int kStack = 16;  // SpareBlocks::kCapacity
    std::vector<typename TestFixture::Pool::shared_lease> leases;
    for (int i = 0; i < kStack + 1; ++i) leases.push_back(pool.LeaseShared(0));
    bool failed = false;
    std::thread([&] {
      for (int i = 0; i < kStack; ++i) leases[i].reset();  // this thread's spare stack is full
      allocations_until_failure = 0;                       // the depot's first node: no memory
      leases[kStack].reset();  // the hand-over fails: the stack stays, this block is deleted
      failed = allocations_until_failure == -1;
      allocations_until_failure = -1;
    }).join();  // the exit hands the 16 over
    EXPECT_TRUE(failed) << "the 17th end made no allocation: the test no longer reaches the failure";
    leases.clear();
    const int allocations = allocations_beginning(pool, leases, kStack);
    EXPECT_EQ(allocations, 0) << "the stack a failed hand-over left with its thread did not come back";
    leases.clear();
  }
}

// The pool's destructor deletes the depot's spare blocks at once (close), not when the last lease
// that outlives the pool ends. Fails if close leaves them to the core's destructor.
TYPED_TEST(AllocationFailure, DestroyingThePoolDeletesTheDepotsBlocksWhileALeaseLives) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    using Pool = typename TestFixture::Pool;
    using Block = detail::SharedLeaseBlock<detail::HandlePoolCore<HostBackend, TypeParam>>;
    HostBackend backend(1);
    auto pool = std::make_unique<Pool>(backend);
    constexpr int kHandedOver = 32;
    std::vector<typename Pool::shared_lease> leases;
    for (int i = 0; i < kHandedOver + 1; ++i) leases.push_back(pool->LeaseShared(0));
    auto survivor = std::move(leases.back());
    leases.pop_back();
    // 16 blocks go to the depot at the 17th end, the other 16 at the thread's exit.
    std::thread([&] { leases.clear(); }).join();
    watched_deletes = 0;
    watched_delete_size = sizeof(Block);
    pool.reset();
    const int deleted = watched_deletes.load();
    watched_delete_size = 0;
    EXPECT_GE(deleted, kHandedOver) << "the depot's blocks outlive the pool";
    survivor.reset();
  }
}

// A backend whose destroy runs a hook first: a test stalls a purger there, inside Purge, while the
// pool holds every cache.
struct GatedBackend : HostBackend {
  explicit GatedBackend(const HostBackend &counters) : HostBackend(counters) {}
  void destroy(handle_type token) noexcept {
    if (auto hook = std::exchange(*on_destroy, nullptr)) hook();  // once
    HostBackend::destroy(token);
  }
  std::shared_ptr<std::function<void()>> on_destroy = std::make_shared<std::function<void()>>();
};

// A thread that exits while a Purge holds its cache skips its exit flush; its spare blocks go to
// the depot when the pool collects the cache (collect_abandoned_caches, here at the next thread's
// registration), so they come back to the beginner. Fails if the collection deletes them with
// the cache instead (the beginner's 16 leases allocate).
TYPED_TEST(AllocationFailure, TheBlocksOfAThreadThatExitsDuringAPurgeComeBack) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend counters(1);
    GatedBackend backend(counters);
    auto on_destroy = backend.on_destroy;
    BasicHandlePool<GatedBackend, TypeParam> pool(backend);
    constexpr int kStack = 16;  // SpareBlocks::kCapacity: no hand-over yet
    std::vector<typename BasicHandlePool<GatedBackend, TypeParam>::shared_lease> leases;
    for (int i = 0; i < kStack; ++i) leases.push_back(pool.LeaseShared(0));
    std::atomic<bool> ended{false}, purging{false};
    std::thread ender([&] {
      leases.clear();  // 16 spare blocks, 16 idle events in this thread's cache
      ended = true;
      while (!purging.load()) std::this_thread::yield();
    });
    while (!ended.load()) std::this_thread::yield();
    bool exited_during_purge = false;
    *on_destroy = [&] {  // the first event the Purge destroys: every cache is held
      purging = true;
      ender.join();
      exited_during_purge = true;
    };
    pool.Purge();
    ASSERT_TRUE(exited_during_purge) << "the Purge destroyed no event: the test no longer stalls it";
    std::thread([&] { pool.Put(pool.Get(0)); }).join();  // registers a cache: collects the exited one's
    const int allocations = allocations_beginning(pool, leases, kStack);
    EXPECT_EQ(allocations, 0) << "the blocks of the thread that exited during the Purge were deleted";
    leases.clear();
  }
}

// The spare block taken on the inlined way, where the loaded magazine turns out empty (after a
// Purge), goes on with the lease around the cache; if that lease cannot get an event, the block
// goes back to the cache, so the next lease still allocates nothing. Fails if the way around the
// cache drops the block it is handed, or takes another.
TYPED_TEST(AllocationFailure, ASpareBlockSurvivesAnEmptyMagazineAndAFailedCreate) {
  if constexpr (kCached<TypeParam>) {
    if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
    HostBackend backend(1);
    typename TestFixture::Pool pool(backend);
    for (int warm = 0; warm < 2; ++warm) (void)pool.LeaseShared(0);  // a spare block, a magazine
    pool.Purge();  // the magazine goes: the next lease finds a block and no event
    backend.inject_create_fault([](std::uint64_t, int) { return true; });
    EXPECT_THROW(pool.LeaseShared(0), HostBackendFault);
    backend.inject_create_fault({});
    allocations_until_failure = 0;
    auto lease = pool.LeaseShared(0);
    allocations_until_failure = -1;
    EXPECT_TRUE(lease) << "the block the failed lease took is back in the cache";
    lease.reset();
    const DeviceStats figures = pool.stats().devices[0];
    EXPECT_EQ(figures.outstanding, 0);
    EXPECT_EQ(figures.gets, figures.puts);
  }
}

using test::HostCompletionBackend;
using test::HostWorkStream;
using CompletionQueue = BasicCompletionQueue<HostCompletionBackend>;
using CompletionAllocationFailure = test::HostCompletionFixture<>;

// Each allocation the poller makes in a pass fails in turn (filing a request in its stream's FIFO
// takes a node of the FIFO map and a slot of the active list): the requests it could not file
// stay with their channel, ahead of those asked for later, and the next pass files them. Each
// callback runs once, and each stream's in the order of its requests. Fails if a request the
// poller could not file is dropped, finished, or overtaken by a later one.
TEST_F(CompletionAllocationFailure, RequestsThePollerCannotFileWaitForTheNextPassInOrder) {
  int failing_at = 0;
  for (bool failed = true; failed; ++failing_at) {
    CompletionQueue queue(backend_, CompletionQueueOptions{CompletionPolling::kCaller});
    HostWorkStream a, b(1);
    std::vector<int> order_a, order_b;  // reserved: a callback that allocated could fail itself
    order_a.reserve(8);
    order_b.reserve(8);
    const auto ask = [&](int i) {
      HostWorkStream &stream = i % 2 == 1 ? a : b;
      std::vector<int> &order = i % 2 == 1 ? order_a : order_b;
      queue.notify(&stream, [&order, i](int) { order.push_back(i); });
    };
    for (int i = 1; i <= 4; ++i) ask(i);
    a.complete_all();
    b.complete_all();
    allocations_until_failure = failing_at;
    std::size_t finished = queue.poll();
    failed = allocations_until_failure == -1;
    allocations_until_failure = -1;
    for (int i = 5; i <= 6; ++i) ask(i);
    a.complete_all();
    b.complete_all();
    for (int pass = 0; pass < 4; ++pass) finished += queue.poll();
    EXPECT_EQ(finished, 6u) << "the poll's allocation " << failing_at << " failed";
    EXPECT_EQ(order_a, (std::vector<int>{1, 3, 5})) << "the poll's allocation " << failing_at << " failed";
    EXPECT_EQ(order_b, (std::vector<int>{2, 4, 6})) << "the poll's allocation " << failing_at << " failed";
    EXPECT_EQ(queue.stats().requests, 6u);
  }
  EXPECT_GE(failing_at, 2) << "the first pass made no allocation: the test no longer reaches the failure";
}

// The queue's own poller thread: while it cannot file a request, it keeps trying, sleeping
// between tries, and files it once memory is back; with no other request in progress it must not
// sleep until the next request rings (none comes). Fails if the poller counts a request it could
// not file as nothing to do (it fails once, then sleeps for ever).
TEST_F(CompletionAllocationFailure, APollerThreadThatCannotFileARequestTriesAgain) {
  CompletionQueue queue(backend_);
  HostWorkStream first, second;
  first.complete_through(UINT64_MAX);
  second.complete_through(UINT64_MAX);
  queue.notify(&first, [](int) { opted_in = true; }).wait();  // on the poller thread
  opted_in_failures = 0;
  opted_in_threads_fail = true;
  // A stream the poller has no FIFO for yet: filing the request allocates.
  CompletionQueue::completion request = queue.notify(&second);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (opted_in_failures.load() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  opted_in_threads_fail = false;
  EXPECT_GE(opted_in_failures.load(), 3) << "the poller stopped trying to file the request";
  while (!request.ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_TRUE(request.ready()) << "the request was not filed once memory was back";
  EXPECT_EQ(request.status(), HostCompletionBackend::kSuccess);
}

}  // namespace
}  // namespace evpool
