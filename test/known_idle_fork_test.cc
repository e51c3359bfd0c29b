// A stream handed back known idle and fork(): the child forgets its parent's streams, the one
// marked known idle on top of the forking thread's cache included, and a parent's lease that the
// child ends known idle is only forgotten (UniqueLease::end), never put on the child's top.
#include <gtest/gtest.h>

#include <cstdint>

#include "evpool/basic_handle_pool.h"
#include "support/host_stream_backend.h"
#include "support/in_child.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Token = HostStreamBackend::handle_type;

using test::in_child;

TEST(KnownIdleAfterFork, TheChildNeitherTrustsNorHandsOutTheParentsMarkedStream) {
  HostStreamBackend backend(1);
  BasicHandlePool<HostStreamBackend> pool(backend);
  auto held = pool.Lease(0);  // a parent's lease, busy, that the child ends known idle
  const Token parents_busy = held.get();
  backend.make_busy(parents_busy, 1000);
  Token marked;
  {
    auto lease = pool.Lease(0);
    marked = lease.get();
    lease.reset_known_idle();  // on top of this thread's cache, marked
  }
  const int failures = in_child([&] {
    int bits = 0;
    held.reset_known_idle();  // a parent's stream: forgotten
    auto first = pool.Lease(0);
    if (first.get() == marked || first.get() == parents_busy) bits |= 1;
    if (!backend.asked_idle_since_busy(first.get())) bits |= 2;
    const Token own = first.get();
    first.reset_known_idle();
    const std::uint64_t queries = backend.queries();
    auto again = pool.Lease(0);
    // The child's own mark holds: on top of its cache, which a checked pool does not keep.
    if (!pool.checked() && (again.get() != own || backend.queries() != queries)) bits |= 4;
    return bits;
  });
  EXPECT_EQ(failures, 0);
  auto parents_next = pool.Lease(0);  // the parent's mark is untouched by the child
  EXPECT_EQ(parents_next.get(), marked);
}

}  // namespace
}  // namespace evpool
