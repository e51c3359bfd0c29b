// evpool: the CPU time a thread has used, by its pthread handle. Private to the library (and used
// by the benchmark's competitors, which clock their own polling threads the same way).
#pragma once

#include <pthread.h>
#include <time.h>

#include <chrono>

namespace evpool::detail {

/// The CPU time `thread` has used so far, or zero if its clock cannot be read. Thread-safe.
inline std::chrono::nanoseconds thread_cpu_time(pthread_t thread) noexcept {
  clockid_t clock{};
  timespec used{};
  if (pthread_getcpuclockid(thread, &clock) != 0 || clock_gettime(clock, &used) != 0)
    return std::chrono::nanoseconds(0);
  return std::chrono::seconds(used.tv_sec) + std::chrono::nanoseconds(used.tv_nsec);
}

}  // namespace evpool::detail
