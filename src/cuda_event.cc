#include "evpool/cuda_event.h"

#include "cuda_runtime_helpers.h"

namespace evpool {

CUDAEvent CUDAEvent::Create(int device_id) { return CreateWithFlags(cudaEventDisableTiming, device_id); }

CUDAEvent CUDAEvent::CreateWithFlags(unsigned flags, int device_id) {
  detail::validate_event_flags(flags);
  const cudaEvent_t handle = detail::create_event_on(device_id, flags);
  return CUDAEvent(handle, device_id);
}

void CUDAEvent::reset(cudaEvent_t handle, int device_id) {
  const cudaEvent_t old = std::exchange(handle_, handle);
  device_id_ = handle ? device_id : -1;
  if (old) detail::check_cuda(detail::destroy_event_tolerating_exit(old), "cudaEventDestroy");
}

void CUDAEvent::destroy_noexcept() noexcept {
  if (handle_) detail::destroy_event_tolerating_exit(handle_);
  handle_ = nullptr;
  device_id_ = -1;
}

}  // namespace evpool
