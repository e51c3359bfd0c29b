#include "evpool/cuda_event.h"

#include "cuda_runtime_helpers.h"

namespace evpool {

CUDAEvent CUDAEventKind::Create(int device_id) { return CreateWithFlags(cudaEventDisableTiming, device_id); }

CUDAEvent CUDAEventKind::CreateWithFlags(unsigned flags, int device_id) {
  detail::validate_event_flags(flags);
  const cudaEvent_t handle = detail::create_event_on(device_id, flags);
  return CUDAEvent(handle, device_id);
}

}  // namespace evpool
