#include "evpool/stream_wait.h"

#include "cuda_runtime_helpers.h"
#include "scoped_current_device.h"

namespace evpool {
namespace {

bool is_special_handle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

// The device of `stream`; the special handles name a stream of the caller's current device.
int device_of(cudaStream_t stream, int current_device) {
  if (is_special_handle(stream)) return current_device;
  int device = -1;
  detail::check_cuda(cudaStreamGetDevice(stream, &device), "cudaStreamGetDevice");
  return device;
}

}  // namespace

void wait(cudaStream_t consumer, cudaStream_t producer, CUDAEventPool &pool) {
  int caller_device = -1;
  detail::check_cuda(cudaGetDevice(&caller_device), "cudaGetDevice");
  const int producer_device = device_of(producer, caller_device);
  const int consumer_device = device_of(consumer, caller_device);
  auto event = pool.Lease(producer_device);  // back to the pool however this ends
  {
    // A special handle means the stream of the caller's device, which is current here anyway.
    detail::ScopedCurrentDevice on_producer(producer_device);
    detail::check_cuda(cudaEventRecord(event, producer), "cudaEventRecord");
  }
  detail::ScopedCurrentDevice on_consumer(consumer_device);
  detail::check_cuda(cudaStreamWaitEvent(consumer, event, 0), "cudaStreamWaitEvent");
}

void wait(cudaStream_t consumer, cudaStream_t producer) {
  wait(consumer, producer, CUDAEventPool::instance());
}

}  // namespace evpool
