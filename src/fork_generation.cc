#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "evpool/detail/fork_guard.h"

namespace evpool::detail {

std::atomic<std::uint32_t> process_fork_generation{0};

namespace {

// Relaxed: see fork_generation().
void on_fork_child() noexcept { process_fork_generation.fetch_add(1, std::memory_order_relaxed); }

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, &on_fork_child);

}  // namespace

}  // namespace evpool::detail
