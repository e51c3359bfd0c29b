// Pool ids (detail/thread_cache_directory.h): each copy of the id source starts at a random point
// and never repeats itself, so that copies whose pools share one thread's cache directory (plugins
// that each link libevpool.a; tools/check-plugins) collide only by chance. This binary replaces
// getrandom() to make it fail on demand, as it does on old kernels and under some seccomp
// profiles: the copies must still start far apart.
#include <gtest/gtest.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <set>

#include "evpool/detail/thread_cache_directory.h"

namespace {
bool getrandom_fails = false;
}  // namespace

extern "C" ssize_t getrandom(void *buffer, size_t length, unsigned int flags) {
  if (getrandom_fails) {
    errno = ENOSYS;
    return -1;
  }
  return syscall(SYS_getrandom, buffer, length, flags);
}

namespace evpool {
namespace {

// How far apart two starts lie on the circle of 2^64 ids.
std::uint64_t distance(std::uint64_t a, std::uint64_t b) { return a - b < b - a ? a - b : b - a; }

// Two copies' counters lie a few bytes apart, and set up within nanoseconds of each other when
// both are first used from one call: their starts must still be as far apart as random ones, not
// within a few thousand ids (what a clock reading and a stack address alone gave).
TEST(PoolIds, CopiesStartFarApartEvenWithoutTheKernelsRandomness) {
  static std::uint64_t counters[2];
  for (bool fails : {false, true}) {
    getrandom_fails = fails;
    const std::uint64_t first = detail::random_id_start(&counters[0]);
    const std::uint64_t second = detail::random_id_start(&counters[1]);
    getrandom_fails = false;
    EXPECT_GT(distance(first, second), std::uint64_t{1} << 40) << (fails ? "without" : "with") << " getrandom";
  }
}

TEST(PoolIds, OneCopyNeverRepeatsAnIdNorHandsOutZero) {
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t id = detail::next_pool_id();
    EXPECT_NE(id, 0u);
    EXPECT_TRUE(seen.insert(id).second) << "id " << id << " handed out twice";
  }
}

}  // namespace
}  // namespace evpool
