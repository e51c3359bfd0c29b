#include <atomic>
#include <cstdint>

#include "evpool/detail/thread_cache_directory.h"

namespace evpool::detail {

std::uint64_t next_pool_id() noexcept {
  // Relaxed: only uniqueness matters. 2^64 pools are never created.
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace evpool::detail
