#include "evpool/cuda_stream.h"

#include "cuda_runtime_helpers.h"
#include "scoped_current_device.h"

namespace evpool {

CUDAStream CUDAStream::Create(bool non_blocking, int device_id) {
  return CreateWithPriority(non_blocking, 0, device_id);
}

CUDAStream CUDAStream::CreateWithPriority(bool non_blocking, int priority, int device_id) {
  const unsigned flags = non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
  {
    detail::ScopedCurrentDevice scope(device_id);  // the range is the device's
    detail::validate_stream_options(flags, priority);
  }
  const cudaStream_t handle = detail::create_stream_on(device_id, flags, priority);
  return CUDAStream(handle, device_id);
}

void CUDAStream::reset(cudaStream_t handle, int device_id) {
  const cudaStream_t old = std::exchange(handle_, handle);
  device_id_ = handle ? device_id : -1;
  if (old) detail::check_cuda(detail::destroy_stream_tolerating_exit(old), "cudaStreamDestroy");
}

void CUDAStream::destroy_noexcept() noexcept {
  if (handle_) detail::destroy_stream_tolerating_exit(handle_);
  handle_ = nullptr;
  device_id_ = -1;
}

}  // namespace evpool
