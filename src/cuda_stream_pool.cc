#include "evpool/cuda_stream_pool.h"

#include <stdexcept>
#include <string>

#include "cuda_runtime_helpers.h"
#include "evpool/cuda_error.h"
#include "process_wide_pools.h"

namespace evpool {
namespace {

// One slot per flag value (cudaStreamDefault, cudaStreamNonBlocking) and priority from 0 (the
// least, on every device CUDA supports) down to -(kPriorities - 1); devices report ranges of a
// few priorities ([-5, 0] on the H200).
constexpr int kPriorities = 32;
static_assert(cudaStreamDefault == 0 && cudaStreamNonBlocking == 1);

using ProcessPools = detail::ProcessWidePools<CUDAStreamPool, 2 * kPriorities>;

}  // namespace

void CUDAStreamLease::synchronize_and_reset() {
  if (!lease_) return;
  if (lease_.from_parent_process()) {  // the parent's stream: forgotten, as reset() does
    reset();
    return;
  }
  if (const cudaError_t error = cudaStreamSynchronize(lease_.get()); error != cudaSuccess)
    throw CUDAError(error, "cudaStreamSynchronize");
  pool_ = nullptr;
  lease_.reset_known_idle();
}

CUDAStreamPool &CUDAStreamPool::instance() { return instance_for(cudaStreamNonBlocking, 0); }

CUDAStreamPool &CUDAStreamPool::instance_for(unsigned stream_flags, int priority) {
  if (stream_flags > 1 || priority > 0 || priority <= -kPriorities) {
    detail::validate_stream_options(stream_flags, priority);  // throws for what no pool accepts
    throw std::invalid_argument("evpool: stream priority " + std::to_string(priority) +
                                " has no process-wide pool (instance_for keys priorities 0 to " +
                                std::to_string(1 - kPriorities) + "); construct a CUDAStreamPool instead");
  }
  const auto slot = static_cast<std::size_t>(stream_flags) * kPriorities + static_cast<std::size_t>(-priority);
  return ProcessPools::find_or_create(slot, [&] { return new CUDAStreamPool(stream_flags, priority); });
}

}  // namespace evpool
