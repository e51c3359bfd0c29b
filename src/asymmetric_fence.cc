#include "evpool/detail/asymmetric_fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace evpool::detail {

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
  static const bool available = register_private_expedited();
  return available;
}

void heavy_fence() noexcept {
  if (!asymmetric_fence_available()) {
    // Owners fence fully, so a full fence here completes the pair.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return;
  }
  // Owners rely on this barrier: it must happen. A registered command can only fail for lack of
  // kernel memory (ENOMEM, for its CPU mask), which passes; retry until it succeeds.
  while (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) sched_yield();
}

}  // namespace evpool::detail
