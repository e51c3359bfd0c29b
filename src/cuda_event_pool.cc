#include "evpool/cuda_event_pool.h"

#include <atomic>

#include "cuda_runtime_helpers.h"

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
  detail::validate_event_flags(event_flags);
  std::atomic<CUDAEventPool *> &slot = process_pools[event_flags];
  // Acquire: pairs with the release below, so a pool found here is fully constructed.
  if (CUDAEventPool *pool = slot.load(std::memory_order_acquire)) return *pool;
  auto *fresh = new CUDAEventPool(event_flags);  // may throw: nothing published
  CUDAEventPool *expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
    return *fresh;
  delete fresh;  // another thread won; its pool is the one
  return *expected;
}

}  // namespace evpool
