#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "evpool/detail/fork_guard.h"

namespace evpool::detail {
namespace {

// Relaxed: the child handler runs in the child's only thread before fork() returns there, so
// that thread sees the new value; threads the child starts later are ordered by their creation.
std::atomic<std::uint32_t> generation{0};

void on_fork_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, &on_fork_child);

}  // namespace

std::uint32_t fork_generation() noexcept { return generation.load(std::memory_order_relaxed); }

}  // namespace evpool::detail
