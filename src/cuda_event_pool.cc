#include "evpool/cuda_event_pool.h"

#include "cuda_runtime_helpers.h"
#include "process_wide_pools.h"

namespace evpool {
namespace {

// One slot per combination of cudaEventBlockingSync (1), cudaEventDisableTiming (2) and
// cudaEventInterprocess (4): every valid flag value indexes it directly.
constexpr unsigned kFlagCombinations = 8;
static_assert((cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess) < kFlagCombinations);

using ProcessPools = detail::ProcessWidePools<CUDAEventPool, kFlagCombinations>;

}  // namespace

CUDAEventPool &CUDAEventPool::instance() { return instance_for(cudaEventDisableTiming); }

CUDAEventPool &CUDAEventPool::instance_for(unsigned event_flags) {
  detail::validate_event_flags(event_flags);  // before indexing: every valid value has a slot
  return ProcessPools::find_or_create(event_flags, [&] { return new CUDAEventPool(event_flags); });
}

}  // namespace evpool
