// The cap at its edges: outside handles given to Put and destroyed later, a fork child of a parent
// with waiters at the cap. Each states what the docs promise; each failed before the count stopped
// at 0 and a fork child forgot its parent's waiters.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_cap.h"
#include "evpool/pool_policy.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

using std::chrono::nanoseconds;
using Pool = BasicHandlePool<HostBackend>;
constexpr std::size_t kCap = 4;

// pool_cap.h: "A handle that records its device given to Put is taken for one of the pool's own
// coming back: hand outside handles in with PutForeign, or the cap may be passed by as many."
// Before the count stopped at 0, once the pool destroyed that handle the count of device 0 went
// below 0, wrapped to 2^64 - 1, and the pool never created again: with nothing alive, every Get
// waited for ever and every GetWithin threw (its error said 18446744073709551615 held).
TEST(PoolCapEdges, AnOutsideHandleGivenToPutAndPurgedLeavesTheCapUsable) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, kCap);
  pool.Put(backend.adopt(backend.create(HostBackend::kDefaultOptions, 0), 0), 0);
  pool.Purge();
  ASSERT_EQ(backend.created(), backend.destroyed()) << "nothing exists through the pool";
  try {
    auto got = pool.GetWithin(nanoseconds(0), 0);
    pool.Put(std::move(got));
  } catch (const CapReachedError &error) {
    ADD_FAILURE() << "no handle alive, yet: " << error.what();
  }
}

// The same wrap through Trim of an outside handle put in over the idle limit (retired, destroyed).
TEST(PoolCapEdges, AnOutsideHandleGivenToPutAndTrimmedLeavesTheCapUsable) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, /*max_idle_per_device=*/1, Checks::kDefault, kCap);
  pool.Put(backend.adopt(backend.create(HostBackend::kDefaultOptions, 0), 0), 0);
  pool.Trim(0);
  ASSERT_EQ(backend.created(), backend.destroyed());
  EXPECT_NO_THROW(pool.Put(pool.GetWithin(nanoseconds(0), 0)));
}

// A fork child of a parent whose threads waited at the cap: those threads are not in the child.
// Only the first waiter flushes every cache on its first round; the child inherited the count of
// waiters, none of its Gets was ever first, and a GetWithin(0) of the child gave up with a handle
// idle in another of its threads' caches.
TEST(PoolCapEdges, AForkChildsFirstWaiterFlushesTheCachesEvenIfTheParentHadWaiters) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, /*max_per_device=*/1);
  auto held = pool.Get(0);
  std::thread waiter([&] { pool.Put(pool.Get(0)); });
  while (pool.stats().total().waits_at_cap < 1) std::this_thread::yield();
  const pid_t child = fork();
  if (child == 0) {
    auto own = pool.Get(0);    // the child's own: the parent's were forgotten
    pool.Put(std::move(own));  // idle, in this thread's cache
    int status = 1;
    std::thread other([&] {
      try {
        pool.Put(pool.GetWithin(nanoseconds(0), 0));
        status = 0;
      } catch (const CapReachedError &) {
      }
    });
    other.join();
    _exit(status);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  pool.Put(std::move(held));
  pool.FlushThreadCache();
  waiter.join();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's GetWithin(0) gave up with its handle idle in a cache";
}

// unique_lease::release(): "the caller owns it and the pool forgets it" (and let_go uncounts it).
// The handle records its device, so handing it back with Put, the natural way, takes it for one
// of the pool's own: not counted back in, yet uncounted again when destroyed. The count wraps and
// the pool never creates again.
TEST(PoolCapEdges, AReleasedHandlePutBackWithPutAndPurgedLeavesTheCapUsable) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, kCap);
  pool.Put(pool.Lease(0).release());
  pool.Purge();
  ASSERT_EQ(backend.created(), backend.destroyed()) << "nothing exists through the pool";
  EXPECT_NO_THROW(pool.Put(pool.GetWithin(nanoseconds(0), 0)));
}

}  // namespace
}  // namespace evpool
