#include "evpool/cuda_event_pool.h"

#include <atomic>
#include <cstdlib>


namespace evpool {
namespace {

// One slot per combination of cudaEventBlockingSync (1), cudaEventDisableTiming (2) and
// cudaEventInterprocess (4): every valid flag value indexes it directly.
constexpr unsigned kFlagCombinations = 8;
static_assert((cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess) < kFlagCombinations);

std::atomic<CUDAEventPool *> process_pools[kFlagCombinations];

}  // namespace

CUDAEventPool &CUDAEventPool::instance() { return instance_for(cudaEventDisableTiming); }

CUDAEventPool &CUDAEventPool::instance_for(unsigned event_flags) {
  // Acquire: pairs with the release below, so a pool found here is fully constructed. A pool
  // exists only for flags that passed validation when it was constructed.
  if (event_flags < kFlagCombinations)
    if (CUDAEventPool *pool = process_pools[event_flags].load(std::memory_order_acquire)) return *pool;
  auto *fresh = new CUDAEventPool(event_flags);  // validates the flags; may throw: nothing published
  std::atomic<CUDAEventPool *> &slot = process_pools[event_flags];
  CUDAEventPool *expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel, std::memory_order_acquire)) {
    if (fresh->checked()) {
      // A checked process-wide pool is never destroyed, so it reports its outstanding events at
      // exit instead; once, for every such pool.
      static const int registered = std::atexit([] {
        for (std::atomic<CUDAEventPool *> &pool : process_pools)
          if (CUDAEventPool *found = pool.load(std::memory_order_acquire))
            found->report_outstanding_at_exit();
      });
      (void)registered;
    }
    return *fresh;
  }
  delete fresh;  // another thread won; its pool is the one
  return *expected;
}

}  // namespace evpool
