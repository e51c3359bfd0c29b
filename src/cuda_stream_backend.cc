#include "evpool/cuda_stream_backend.h"

#include "cuda_runtime_helpers.h"

namespace evpool {

void CUDAStreamBackend::validate_options(const StreamOptions &options) const {
  detail::validate_stream_options(options.flags, options.priority);
}

// The pool validated the options once, when it was constructed (validate_options).
cudaStream_t CUDAStreamBackend::create(const StreamOptions &options, int device) {
  return detail::create_stream_on(device, options.flags, options.priority);
}

void CUDAStreamBackend::destroy(cudaStream_t handle) noexcept {
  detail::destroy_stream_tolerating_exit(handle);
}

int CUDAStreamBackend::device_count() const {
  int count = 0;
  detail::check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

int CUDAStreamBackend::current_device() const {
  int device = -1;
  detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

bool CUDAStreamBackend::has_pending_work(cudaStream_t handle) const noexcept {
  const cudaError_t status = cudaStreamQuery(handle);
  if (status == cudaSuccess) return false;
  // The runtime keeps cudaErrorNotReady as the thread's last error; the caller asked no question
  // that it answers. Any other error stays for the caller's next call to find.
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return true;
  }
  return false;
}

int CUDAStreamBackend::query_device(cudaStream_t handle) const noexcept {
  int device = -1;
  if (cudaStreamGetDevice(handle, &device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return device;
}

}  // namespace evpool
