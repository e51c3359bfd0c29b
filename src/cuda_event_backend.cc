#include "evpool/cuda_event_backend.h"

#include "cuda_runtime_helpers.h"

namespace evpool {

void CUDAEventBackend::validate_options(unsigned flags) const { detail::validate_event_flags(flags); }

// The pool validated the flags once, when it was constructed (validate_options).
cudaEvent_t CUDAEventBackend::create(unsigned flags, int device) {
  return detail::create_event_on(device, flags);
}

void CUDAEventBackend::destroy(cudaEvent_t handle) noexcept { detail::destroy_event_tolerating_exit(handle); }

int CUDAEventBackend::device_count() const { return detail::device_count(); }

int CUDAEventBackend::current_device() const { return detail::current_device(); }

}  // namespace evpool
