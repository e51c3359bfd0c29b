#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "evpool/detail/fork_guard.h"
#include "evpool/detail/thread_cache_directory.h"

namespace evpool::detail {

std::atomic<std::uint32_t> process_fork_generation{0};

namespace {

// Runs in the child's only thread, before fork() returns there. Both steps in one handler, so that
// no handler registered by someone else runs between them (thread_cache_directory.h says why).
void on_fork_child() noexcept {
  // Relaxed: see fork_generation().
  process_fork_generation.fetch_add(1, std::memory_order_relaxed);
  forget_hint_in_fork_child();
}

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, &on_fork_child);

}  // namespace

}  // namespace evpool::detail
