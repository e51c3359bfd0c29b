#include "evpool/stream_wait.h"

#include "evpool/detail/capture_aware_wait.h"
#include "evpool/detail/cuda_streams.h"

namespace evpool {

void wait(cudaStream_t consumer, cudaStream_t producer, CUDAEventPool &pool) {
  detail::CudaStreams streams;
  detail::capture_aware_wait(streams, consumer, producer, pool);
}

void wait(cudaStream_t consumer, cudaStream_t producer) {
  wait(consumer, producer, CUDAEventPool::instance());
}

}  // namespace evpool
