#include "evpool/detail/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace evpool::detail {

std::atomic<bool> owners_fence_fully{true};

namespace {

int membarrier(int command) noexcept { return static_cast<int>(syscall(SYS_membarrier, command, 0, 0)); }

bool register_private_expedited() noexcept {
  const int supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool asymmetric_fence_available() noexcept {
  // A function-local static: computed once, thread-safe, and inherited by fork() children, as the
  // kernel's registration is.
  static const bool available = [] {
    const bool registered = register_private_expedited();
    if (registered) owners_fence_fully.store(false, std::memory_order_relaxed);
    return registered;
  }();
  return available;
}

void heavy_fence() noexcept {
  if (asymmetric_fence_available() && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  // Without registration owners fence fully, and a full fence here completes the pair. A
  // registered process cannot get here: membarrier(2) lists no error for a registered command.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

}  // namespace evpool::detail
