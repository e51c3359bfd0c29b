// The process-wide state of the thread-cache directories (evpool/detail/thread_cache_directory.h):
// the pool ids they are keyed by, and each thread's directory. Both are defined here, once, so
// that every shared object of a process that uses this library reaches the same ones, and the
// fork handler (fork_generation.cc) clears the directory that every inlined lookup reads.
#include "evpool/detail/thread_cache_directory.h"

#include <atomic>
#include <cstdint>

namespace evpool::detail {

constinit thread_local ThreadCacheDirectory this_thread_caches{};

std::uint64_t next_pool_id() noexcept {
  // Relaxed: only uniqueness matters. 2^64 pools are never created.
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace evpool::detail
