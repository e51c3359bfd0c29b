// After fork() a child must neither hand out nor destroy its parent's events: the pool forgets
// them at the child's first operation and starts empty, while the parent keeps its own. That
// covers the events a parent leased (a lease dying in the child forgets its event) and the
// parent's idle count (the child starts from zero, even where a parent thread was in the middle of
// a Put or a Get when another one forked). HostBackend's tokens carry serial numbers, so a child
// can tell its parent's events from its own; its copy of the backend counts its own destroys.
// What pthread_atfork, and so this guard, cannot see (vfork, raw clone, _Fork): docs/fork.md.
#include <signal.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "deterministic/deterministic_policy.h"
#include "deterministic/deterministic_scheduler.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/depot_stripes.h"
#include "support/idle_events.h"
#include "support/in_child.h"

namespace evpool {
namespace {

using Pool = BasicHandlePool<HostBackend>;
using testing_support::DeterministicScheduler;
using testing_support::fill;
using testing_support::StallStrategy;

using test::in_child;

// Both hints of the forking thread's directory name caches of the parent: the child starts with
// neither (thread_cache_directory.h), so that its first call on either pool makes the fork check.
TEST(PoolAfterFork, TheChildStartsWithNoHint) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool a(backend), b(backend);
  a.Put(a.Get(0));
  b.Put(b.Get(0));
  ASSERT_NE(detail::this_thread_caches.hints[1].cache, nullptr);
  const int failures = in_child([] {
    int bits = 0;
    for (const auto &hint : detail::this_thread_caches.hints)
      if (hint.pool_id != 0 || hint.cache != nullptr) bits |= 1;
    return bits;
  });
  EXPECT_EQ(failures, 0) << "a hint survived fork()";
}

TEST(PoolAfterFork, TheChildStartsEmptyAndNeverDestroysItsParentsEvents) {
  HostBackend backend(2);
  Pool pool(backend);
  fill(pool, 0, 3);
  fill(pool, 1, 2);
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    HostBackend::Event event = pool.Get(0);
    if (backend.created() != created + 1) bits |= 1;                // a miss: the pool is empty
    if (HostBackend::serial_of(event.get()) <= created) bits |= 2;  // a fresh token
    pool.Put(std::move(event));
    pool.Purge();
    if (backend.destroyed() != destroyed + 1) bits |= 4;  // only the child's own event
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the child reused a parent event; 2: its token was not fresh; "
                            "4: the child destroyed parent events";

  // The parent's pool is untouched: its idle events are still there.
  HostBackend::Event event = pool.Get(0);
  EXPECT_LE(HostBackend::serial_of(event.get()), created);
  EXPECT_EQ(backend.created(), created);
}

// The forking thread's cache hint does not survive fork(), so a child's first call misses it and
// makes the fork check, whichever call it is: here a Put, which with the hint would file the event
// beside the parent's in the forking thread's warm cache.
TEST(PoolAfterFork, AChildWhoseFirstCallIsAPutForgetsItsParentsEventsFirst) {
  HostBackend backend(1);
  Pool pool(backend);
  fill(pool, 0, 3);  // the forking thread's cache holds the parent's events
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    pool.Put(backend.adopt(backend.create(0, 0), 0), 0);
    HostBackend::Event first = pool.Get(0);
    if (HostBackend::serial_of(first.get()) <= created) bits |= 1;  // the child's own event
    HostBackend::Event second = pool.Get(0);
    if (HostBackend::serial_of(second.get()) <= created) bits |= 2;  // a miss, not a parent's
    pool.Put(std::move(first));
    pool.Put(std::move(second));
    pool.Purge();
    if (backend.destroyed() != destroyed + 2) bits |= 4;  // only the child's two events
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the child's Get missed its own Put; 2: it handed out a parent "
                            "event; 4: the child destroyed parent events";
  EXPECT_EQ(backend.created(), created);
}

// Without caches no call has a hint to trust: Get and Put check for the fork on the depot's path.
TEST(PoolAfterFork, AnUncachedPoolsChildNeitherHandsOutNorLosesEvents) {
  HostBackend backend(1);
  BasicHandlePool<HostBackend, NoCachePolicy<>> pool(backend);
  fill(pool, 0, 3);
  const std::uint64_t created = backend.created();

  const int get_first = in_child([&] {
    const HostBackend::Event event = pool.Get(0);
    return HostBackend::serial_of(event.get()) <= created ? 1 : 0;  // a fresh event, not a parent's
  });
  EXPECT_EQ(get_first, 0) << "the child's first Get handed out a parent event";

  const int put_first = in_child([&] {
    HostBackend::Event own = backend.adopt(backend.create(0, 0), 0);
    const auto token = own.get();
    pool.Put(std::move(own), 0);
    return pool.Get(0).get() == token ? 0 : 1;  // the only idle event is the child's own
  });
  EXPECT_EQ(put_first, 0) << "the child's first Put was lost, or a parent event came out first";
}

// Where membarrier is refused, the caches a child forgets reopen in the state that sends their
// owner through its full fence (thread_cache.h). Fails if forget_in_child reopens them as kOpen.
TEST(PoolAfterFork, AChildsForgottenCachesStillMakeTheirOwnerFenceFully) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  using FencedPool = BasicHandlePool<HostBackend, test::OwnersFenceFullyPolicy>;
  HostBackend backend(1);
  FencedPool pool(backend);
  fill(pool, 0, 3);                    // this thread's cache is warm when it forks
  const int failures = in_child([&] {  // one fence per call
    return test::OwnersFenceFully::fences_during([&] { pool.Put(pool.Get(0)); }) == 2 ? 0 : 1;
  });
  EXPECT_EQ(failures, 0) << "the child's Get and Put did not both fence fully";
}

// stats() in a child describes the child's pool only (pool_stats.h): every figure starts at 0,
// although the parent's counts sit in the shared counters, in two depot stripes, in the forking
// thread's cache and in a cache of another thread that is alive in the parent; then the child's
// own calls count.
TEST(PoolAfterFork, TheChildsStatsStartAtZeroAndCountOnlyItsOwnCalls) {
  testing_support::restart_depot_stripe_hints();  // this thread's home stripe 0, the next 1
  HostBackend backend(2);
  Pool pool(backend);
  fill(pool, 0, 5);
  pool.FlushThreadCache();  // 5 counted into stripe 0
  // A thread takes them (counted out of stripe 0), creates 3, and its exit flushes all 8 into its
  // home stripe 1; the Trim destroys 5 and counts them out of stripe 0: the stripes count -5 and 8.
  std::thread([&] { fill(pool, 0, 8); }).join();
  pool.Trim(3);
  fill(pool, 1, 3);
  HostBackend::Event adopted = pool.Get(1);
  pool.Put(backend.adopt(adopted.release(), -1), 1);  // an adopted Put
  std::thread([&] { fill(pool, 0, 2); }).join();      // a cache of an exited thread, not yet collected
  std::atomic<bool> fork_done{false};
  std::atomic<bool> other_filled{false};
  std::thread other([&] {  // a cache of a thread that is alive when the parent forks
    fill(pool, 1, 2);
    other_filled.store(true);
    while (!fork_done.load()) std::this_thread::yield();
  });
  while (!other_filled.load()) std::this_thread::yield();
  ASSERT_GT(pool.stats().total().gets, 0u);

  const int failures = in_child([&] {
    int bits = 0;
    const DeviceStats before = pool.stats().total();
    if (before.created != 0 || before.destroyed != 0 || before.gets != 0 || before.puts != 0 ||
        before.puts_adopted != 0 || before.idle != 0 || before.outstanding != 0 ||
        before.outstanding_peak_bound != 0)
      bits |= 1;
    fill(pool, 0, 1);
    const DeviceStats after = pool.stats().devices[0];
    if (after.created != 1 || after.gets != 1 || after.gets_missed != 1 || after.puts != 1 ||
        after.idle != 1 || after.outstanding != 0)
      bits |= 2;
    if (pool.stats().devices[1].gets != 0) bits |= 4;
    return bits;
  });
  fork_done.store(true);
  other.join();
  EXPECT_EQ(failures, 0) << "bit 1: the child's stats() started with the parent's figures; 2: its "
                            "own calls were miscounted; 4: device 1 counted calls nobody made";
}

TEST(PoolAfterFork, ManyThreadsOfTheChildForgetTheParentsEventsExactlyOnce) {
  HostBackend backend(1);
  Pool pool(backend);
  fill(pool, 0, 16);
  const std::uint64_t created = backend.created();

  const int failures = in_child([&] {
    std::atomic<int> reused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 100; ++i) {
          HostBackend::Event event = pool.Get(0);
          if (HostBackend::serial_of(event.get()) <= created) ++reused;
          pool.Put(std::move(event));
        }
      });
    for (auto &thread : threads) thread.join();
    return reused.load() == 0 ? 0 : 1;
  });
  EXPECT_EQ(failures, 0) << "a thread of the child got a parent event";
}

TEST(PoolAfterFork, AGrandchildForgetsItsParentsEventsToo) {
  HostBackend backend(1);
  Pool pool(backend);
  fill(pool, 0, 2);
  const int failures = in_child([&] {
    fill(pool, 0, 2);  // the child's own events
    const std::uint64_t child_created = backend.created();
    return in_child([&] {
      HostBackend::Event event = pool.Get(0);
      return HostBackend::serial_of(event.get()) > child_created ? 0 : 1;
    });
  });
  EXPECT_EQ(failures, 0) << "the grandchild got an event of its parent";
}

// A unique lease taken before fork() holds a parent's event: dying in the child, it must forget the
// event, neither putting it into the child's pool (which would hand it out) nor destroying it.
TEST(PoolAfterFork, AUniqueLeaseOfTheParentDyingInTheChildNeitherReturnsNorDestroysItsEvent) {
  HostBackend backend(1);
  Pool pool(backend);
  auto lease = pool.Lease(0);
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    lease.reset();
    if (backend.destroyed() != destroyed) bits |= 1;
    HostBackend::Event event = pool.Get(0);
    if (HostBackend::serial_of(event.get()) <= created) bits |= 2;
    pool.Put(std::move(event));
    pool.Purge();
    if (backend.destroyed() != destroyed + 1) bits |= 4;  // only the child's own event
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the lease destroyed the parent's event; 2: the child handed it "
                            "out; 4: the child's pool destroyed it";
}

// A pool destroyed while leases were out ends through the deferred work (deferred_work.h), which a
// fork child inherits: its end in the child must forget the parent's events it holds (idle and
// retired), not destroy them.
TEST(PoolAfterFork, AParentsPoolEndedByTheChildsDeferredWorkDestroysNoneOfItsParentsEvents) {
  HostBackend backend(1);
  std::optional<Pool> pool(std::in_place, backend, HostBackend::kDefaultOptions, 1);
  auto first = pool->Lease(0);
  auto last = pool->Lease(0);
  pool.reset();
  first.reset();  // retired: the pool is gone
  last.reset();   // the last lease: the pool's end is deferred
  const std::uint64_t destroyed = backend.destroyed();
  ASSERT_LT(destroyed, backend.created());
  const int failures = in_child([&] {
    run_deferred_work();
    return backend.destroyed() != destroyed ? 1 : 0;
  });
  EXPECT_EQ(failures, 0) << "the child destroyed its parent's events";
  run_deferred_work();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "in the parent, the pool's end destroys them";
}

// The same for a shared lease, whose event lives in its pool node: the last copy dying in the child
// must not push that node back onto the child's event stack.
TEST(PoolAfterFork, ASharedLeaseOfTheParentDyingInTheChildNeitherReturnsNorDestroysItsEvent) {
  HostBackend backend(1);
  Pool pool(backend);
  auto lease = pool.LeaseShared(0);
  auto copy = lease;
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    copy.reset();
    lease.reset();  // the last copy
    if (backend.destroyed() != destroyed) bits |= 1;
    HostBackend::Event event = pool.Get(0);
    if (HostBackend::serial_of(event.get()) <= created) bits |= 2;
    pool.Put(std::move(event));
    pool.Purge();
    if (backend.destroyed() != destroyed + 1) bits |= 4;
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the lease destroyed the parent's event; 2: the child handed it "
                            "out; 4: the child's pool destroyed it";
}

// A shared lease's block kept in the parent's cache (shared_lease_block.h) serves the child's
// first shared lease: it must carry the child's fork generation, or each of the child's leases
// would forget its own event as a parent's, and the next one create another.
TEST(PoolAfterFork, AChildsSharedLeasesOnARecycledBlockReturnTheirEvents) {
  HostBackend backend(1);
  Pool pool(backend);
  { auto lease = pool.LeaseShared(0); }  // its block waits in this thread's cache
  const std::uint64_t created = backend.created();

  const int failures = in_child([&] {
    for (int i = 0; i < 3; ++i) {
      auto lease = pool.LeaseShared(0);
      auto copy = lease;
    }
    return backend.created() == created + 1 ? 0 : 1;
  });
  EXPECT_EQ(failures, 0) << "the child created an event per shared lease: each was forgotten as a "
                            "parent's";
}

// A lease taken before fork() that ends in the child after the child has used the pool: the
// child's cache then has a loaded magazine with room, the case end_lease puts an event into inline.
// The parent's event must still only be forgotten, never filed there (the next Get would hand it
// out, Purge would destroy it), for a unique and for a shared lease.
TEST(PoolAfterFork, AParentsLeaseEndingWhereTheChildsCacheHasRoomIsOnlyForgotten) {
  HostBackend backend(1);
  Pool pool(backend);
  auto unique = pool.Lease(0);
  auto shared = pool.LeaseShared(0);
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    pool.Put(pool.Get(0));  // the child's own event: its loaded magazine is held, with room
    unique.reset();
    shared.reset();
    if (backend.destroyed() != destroyed) bits |= 1;
    std::vector<HostBackend::Event> events;
    for (int i = 0; i < 3; ++i) events.push_back(pool.Get(0));
    for (const auto &event : events)
      if (HostBackend::serial_of(event.get()) <= created) bits |= 2;
    for (auto &event : events) pool.Put(std::move(event));
    pool.Purge();
    if (backend.destroyed() != destroyed + (backend.created() - created)) bits |= 4;  // only its own
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: a lease destroyed the parent's event; 2: the child handed a "
                            "parent's event out; 4: the child's pool destroyed one";
}

// Reports from a fork child when its only thread exits, after that thread's cache was flushed
// (thread-local objects die in the reverse order of their construction).
struct ReportAtThreadExit {
  std::function<int()> status;
  ~ReportAtThreadExit() {
    if (status) _exit(status());
  }
};

// The forking thread's cache still holds the parent's events in the child; when that thread exits
// there before calling the pool, its exit flush must forget them, not hand them to the depot (over
// the idle limit, destroying some).
// A fork() from a signal handler that interrupts a thread's cache lookup, after the lookup's fork
// check and before it sets the hint, leaves the child's thread a hint to the parent's cache. The
// child's FlushThreadCache must then neither destroy any of the parent's events (the depot's idle
// limit, 2 here, would destroy what does not fit) nor let its Gets hand one out. (The hint is put
// back by hand here, as the interrupted lookup would set it.)
TEST(PoolAfterFork, AFlushThroughAHintThatSurvivedTheForkMovesNoneOfTheParentsEvents) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/2);
  fill(pool, 0, 4);  // 4 idle in this thread's cache, none in the depot
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();
  const detail::ThreadCacheDirectory directory = detail::this_thread_caches;
  ASSERT_NE(directory.hints[0].cache, nullptr) << "the thread's cache is hinted";
  const int failures = in_child([&] {
    detail::this_thread_caches.hints[0] = directory.hints[0];
    pool.FlushThreadCache();
    int bits = backend.destroyed() != destroyed ? 1 : 0;  // a parent's event destroyed
    for (int i = 0; i < 4; ++i) {
      HostBackend::Event event = pool.Get(0);
      if (HostBackend::serial_of(event.get()) <= created) bits |= 2;  // a parent's token
      (void)event.release();
    }
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the child's flush destroyed its parent's events; bit 2: it handed one out";
}

// A fork() from a signal handler that lands inside a thread's slow cache lookup, after the
// lookup's fork check: the child goes on with the lookup, finds the thread's cache of its parent's
// events and sets the hint, after which no call checks again. The lookup's second check
// (hinted_after_fork_check) must forget the parent's events. The fork is made where the signal
// would land, by an atomic that forks at the first load of a flag once armed: the lookup's load of
// the pool's closed flag, between its first check and its finding the cache.
bool fork_at_next_flag_load = false;
pid_t forked_child = -1;  // in the parent: the child's pid; in the child: 0

template <class T>
struct ForkingAtomic : std::atomic<T> {
  using std::atomic<T>::atomic;
  T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    if constexpr (std::is_same_v<T, bool>) {
      if (fork_at_next_flag_load) {
        fork_at_next_flag_load = false;
        forked_child = fork();
      }
    }
    return std::atomic<T>::load(order);
  }
};
struct ForkingPolicy : DefaultPoolPolicy {
  template <class T>
  using atomic = ForkingAtomic<T>;
};

TEST(PoolAfterFork, AForkInsideTheSlowLookupAfterItsCheckStillForgetsTheParentsEvents) {
  HostBackend backend(1);
  BasicHandlePool<HostBackend, ForkingPolicy> pool(backend);
  Pool other(backend), third(backend);
  fill(pool, 0, 4);  // 4 idle in this thread's cache for `pool`
  other.Put(other.Get(0));
  third.Put(third.Get(0));  // the two hints now name `third` and `other`: the next call on `pool`
                            // looks its cache up
  const std::uint64_t created = backend.created();
  fork_at_next_flag_load = true;
  HostBackend::Event event = pool.Get(0);  // forks inside its lookup
  if (forked_child == 0) _exit(HostBackend::serial_of(event.get()) <= created ? 1 : 0);  // a parent's token
  ASSERT_GT(forked_child, 0) << "the lookup made no load of the closed flag: the fork never happened";
  int status = 0;
  waitpid(forked_child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's Get handed out its parent's event after a fork inside the lookup";
  pool.Put(std::move(event));
}

// A fork() from a signal handler that lands inside hint(), on the thread that is setting the hint:
// the child's handler clears both hints, and the resumed hint() may write its copy of the old
// first hint back as the second, for a pool whose lookup made no check in the child. hint() reads
// the fork generation again after its writes and clears the hints if it changed. The fork is made
// at each instruction of hint() in turn: the thread single-steps through it (x86-64's trap flag:
// each step raises SIGTRAP), and the handler forks at the chosen step (also at the few steps
// around the call, where the child's handler alone clears what it must). In each child, a Get of
// the pool that the first hint named must make the fork check, and so not hand out its parent's
// event. Without the second read, the fork between hint()'s copy of the first hint and its store
// into the second is the one that fails.
#if defined(__x86_64__)
volatile sig_atomic_t steps_to_fork = 0;
volatile pid_t stepped_child = -1;  // in the parent: the child's pid, or -1; in the child: 0

void fork_at_chosen_step(int, siginfo_t *, void *context) {
  if (steps_to_fork == 0) return;
  steps_to_fork = steps_to_fork - 1;
  if (steps_to_fork != 0) return;
  stepped_child = fork();
  static_cast<ucontext_t *>(context)->uc_mcontext.gregs[REG_EFL] &= ~0x100LL;  // no more steps, in either
}

void start_stepping() { asm volatile("pushfq\n\torq $0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc"); }
void stop_stepping() { asm volatile("pushfq\n\tandq $~0x100, (%%rsp)\n\tpopfq" ::: "memory", "cc"); }
#endif

TEST(PoolAfterFork, AForkInsideHintLeavesTheChildNoHintItsLookupDidNotCheck) {
  if (test::pools_are_checked()) GTEST_SKIP() << test::kNoCachesWhenChecked;
#if !defined(__x86_64__)
  GTEST_SKIP() << "single-steps with x86-64's trap flag";
#else
  if (test::OwnersFenceFully::kUnderTsan)
    GTEST_SKIP() << "under ThreadSanitizer the steps would fork inside its runtime";
  HostBackend backend(1);
  Pool first(backend), looked_up(backend);
  detail::ThreadCacheDirectory &directory = detail::this_thread_caches;
  fill(first, 0, 4);  // 4 idle in this thread's cache for `first`; its lookup hinted it
  const detail::ThreadCacheDirectory::Entry first_hint = directory.hints[0];
  looked_up.Put(looked_up.Get(0));
  const detail::ThreadCacheDirectory::Entry looked_up_hint = directory.hints[0];
  ASSERT_NE(first_hint.pool_id, looked_up_hint.pool_id);
  const std::uint64_t created = backend.created();
  struct sigaction action = {}, previous = {};
  action.sa_sigaction = &fork_at_chosen_step;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGTRAP, &action, &previous), 0);
  std::string failed;  // "step:status" of each child that failed
  int step = 1;
  for (;; ++step) {
    directory.hints[0] = first_hint;
    directory.hints[1] = looked_up_hint;
    stepped_child = -1;
    steps_to_fork = step;
    start_stepping();
    directory.hint(looked_up_hint.pool_id, looked_up_hint.cache);  // the lookup of `looked_up` sets its hint
    stop_stepping();
    steps_to_fork = 0;
    if (stepped_child == 0) {  // the child: its Get of `first` must make the fork check
      HostBackend::Event event = first.Get(0);
      _exit(HostBackend::serial_of(event.release()) <= created ? 1 : 0);  // 1: a parent's token
    }
    if (stepped_child == -1) break;  // hint() ended before this step: every step was tried
    int status = 0;
    waitpid(stepped_child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed += " " + std::to_string(step) + ":" + std::to_string(status);
  }
  sigaction(SIGTRAP, &previous, nullptr);
  std::printf("[ forked   ] a child at each of %d steps around hint()\n", step - 1);
  EXPECT_GT(step, 4) << "too few steps: hint() was not stepped through";
  EXPECT_EQ(failed, "") << "a child's Get of the first hint's pool handed out its parent's event (step:status)";
#endif
}

TEST(PoolAfterFork, AThreadExitingInTheChildBeforeAnyCallDestroysNoneOfItsParentsEvents) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/2);
  int status = -1;
  std::thread([&] {
    thread_local ReportAtThreadExit report;  // constructed before the thread's cache directory
    fill(pool, 0, 4);                        // 4 idle in this thread's cache, none in the depot
    const std::uint64_t destroyed = backend.destroyed();
    const pid_t pid = fork();
    if (pid == 0) {
      report.status = [&backend, destroyed] { return backend.destroyed() != destroyed ? 1 : 0; };
      return;  // the child's only thread exits: its cache is flushed, then the report runs
    }
    int wait_status = 0;
    waitpid(pid, &wait_status, 0);
    status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  }).join();
  EXPECT_EQ(status, 0) << "1: the child destroyed its parent's events when its thread exited";
}

// The child's idle count. A fork() child inherits the parent's count of idle events per device;
// forgetting the parent's events gives back the places of those on the stack, but a parent thread
// in the middle of a Put (place taken, node not yet pushed) or of a Get (node popped, place not
// yet given back) holds a place that nobody in the child will ever return. Unless the child starts
// its count from zero, it then destroys events Put while it is under the limit.
//
// The deterministic scheduler makes that fork reproducible: thread 0 runs one pool operation and
// is stalled at each of its atomic operations in turn; meanwhile thread 1 forks, and the child
// checks that it keeps all kLimit events it puts.
using SteppedPool = BasicHandlePool<HostBackend, testing_support::DeterministicNoCachePolicy<>>;
constexpr int kLimit = 3;

// Runs in the child: Puts kLimit events of its own; all must stay idle, none destroyed.
int child_keeps_what_it_puts_under_the_limit(SteppedPool &pool, HostBackend &backend) {
  int bits = 0;
  std::vector<HostBackend::Event> own;
  for (int i = 0; i < kLimit; ++i) own.push_back(pool.Get(0));  // misses: the pool starts empty
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();
  for (auto &event : own) pool.Put(std::move(event));
  if (backend.destroyed() != destroyed) bits |= 1;
  for (int i = 0; i < kLimit; ++i) own.push_back(pool.Get(0));
  if (backend.created() != created) bits |= 2;
  return bits;
}

// `setup` prepares the parent's pool, `in_flight` is thread 0's operation. Returns one line per
// stall point whose child failed.
template <class Setup, class InFlight>
std::vector<std::string> fork_while_an_operation_is_in_flight(Setup setup, InFlight in_flight) {
  std::vector<std::string> failed;
  int stall_at = 1;
  for (;; ++stall_at) {
    testing_support::restart_depot_stripe_hints();
    HostBackend backend(1);
    SteppedPool pool(backend, HostBackend::kDefaultOptions, kLimit);
    setup(pool);
    int status = 0;
    StallStrategy strategy(stall_at);
    DeterministicScheduler::run(
        {[&] { in_flight(pool); },
         [&] { status = in_child([&] { return child_keeps_what_it_puts_under_the_limit(pool, backend); }); }},
        strategy);
    if (!strategy.stalled()) break;  // thread 0 finished first: every stall point was tried
    if (status != 0)
      failed.push_back("stall point " + std::to_string(stall_at) + ": child status " + std::to_string(status));
  }
  std::printf("[ forked   ] a child at each of %d stall points of the parent's operation; %zu failed\n",
              stall_at - 1, failed.size());
  return failed;
}

std::string lines(const std::vector<std::string> &failed) {
  std::string text;
  for (const std::string &line : failed)
    text += "\n  " + line +
            " (bit 1: a Put under the limit "
            "destroyed its event; 2: a kept event was missing)";
  return text;
}

TEST(PoolAfterFork, AChildForkedDuringAParentsPutKeepsEveryEventItPutsUnderTheLimit) {
  HostBackend::Event pending;
  const auto failed = fork_while_an_operation_is_in_flight(
      [&](SteppedPool &pool) {
        fill(pool, 0, kLimit);
        pending = pool.Get(0);  // kLimit - 1 idle, and one on its way back
      },
      [&](SteppedPool &pool) { pool.Put(std::move(pending)); });
  EXPECT_TRUE(failed.empty()) << lines(failed);
}

TEST(PoolAfterFork, AChildForkedDuringAParentsGetKeepsEveryEventItPutsUnderTheLimit) {
  const auto failed =
      fork_while_an_operation_is_in_flight([](SteppedPool &pool) { fill(pool, 0, kLimit); },  // at the limit
                                           [](SteppedPool &pool) { HostBackend::Event event = pool.Get(0); });
  EXPECT_TRUE(failed.empty()) << lines(failed);
}

}  // namespace
}  // namespace evpool
