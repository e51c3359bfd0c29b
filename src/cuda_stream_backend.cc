#include "evpool/cuda_stream_backend.h"

#include "cuda_runtime_helpers.h"
#include "driver_entry_points.h"

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

int CUDAStreamBackend::device_count() const { return detail::device_count(); }

int CUDAStreamBackend::current_device() const { return detail::current_device(); }


bool CUDAStreamBackend::has_pending_work(cudaStream_t handle) const noexcept {
  if (reuse == StreamReuse::kAtOnce) return false;
  const detail::DriverEntryPoints &calls = detail::driver();
  if (calls.query != nullptr) {
    const CUresult status =
        detail::with_relaxed_capture(calls, [&] { return calls.query(reinterpret_cast<CUstream>(handle)); });
    if (status == CUDA_SUCCESS) return false;
    if (status == CUDA_ERROR_NOT_READY) return true;
  }
  // No entry point, or an error (a thread with no current context, say): the runtime's query,
  // which sets the context up. It leaves no last error for "not ready"; another error (of earlier
  // asynchronous work) stays the thread's last error, for the caller to find, as the runtime
  // leaves it after any call.
  return detail::with_relaxed_capture(calls, [&] { return cudaStreamQuery(handle); }) == cudaErrorNotReady;
}

int CUDAStreamBackend::query_device(cudaStream_t handle) const noexcept {
  const detail::DriverEntryPoints &calls = detail::driver();
  CUdevice device = -1;
  if (calls.get_device != nullptr && detail::with_relaxed_capture(calls, [&] {
                                       return calls.get_device(reinterpret_cast<CUstream>(handle), &device);
                                     }) == CUDA_SUCCESS)
    return static_cast<int>(device);
  int runtime_device = -1;
  if (detail::with_relaxed_capture(calls, [&] { return cudaStreamGetDevice(handle, &runtime_device); }) !=
      cudaSuccess) {
    (void)cudaGetLastError();  // the failure is answered by -1
    return -1;
  }
  return runtime_device;
}

}  // namespace evpool
