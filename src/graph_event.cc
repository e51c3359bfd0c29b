#include "evpool/graph_event.h"

#include "evpool/detail/capture_aware_wait.h"
#include "evpool/detail/cuda_streams.h"

namespace evpool {
namespace {

GraphEvent graph_owned(cudaStream_t capturing, CUDAEventPool &pool, bool record) {
  detail::CudaStreams streams;
  const auto owned = detail::graph_owned_event(streams, capturing, pool, record);
  return GraphEvent(owned.event, owned.device);
}

}  // namespace

GraphEvent record_external(cudaStream_t capturing, CUDAEventPool &pool) {
  return graph_owned(capturing, pool, /*record=*/true);
}
GraphEvent record_external(cudaStream_t capturing) {
  return record_external(capturing, CUDAEventPool::instance());
}

GraphEvent wait_external(cudaStream_t capturing, CUDAEventPool &pool) {
  return graph_owned(capturing, pool, /*record=*/false);
}
GraphEvent wait_external(cudaStream_t capturing) {
  return wait_external(capturing, CUDAEventPool::instance());
}

}  // namespace evpool
