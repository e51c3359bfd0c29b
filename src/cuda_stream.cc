#include "evpool/cuda_stream.h"

#include "cuda_runtime_helpers.h"
#include "scoped_current_device.h"

namespace evpool {

CUDAStream CUDAStreamKind::Create(bool non_blocking, int device_id) {
  return CreateWithPriority(non_blocking, 0, device_id);
}

CUDAStream CUDAStreamKind::CreateWithPriority(bool non_blocking, int priority, int device_id) {
  const unsigned flags = non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
  {
    detail::ScopedCurrentDevice scope(device_id);  // the range is the device's
    detail::validate_stream_options(flags, priority);
  }
  const cudaStream_t handle = detail::create_stream_on(device_id, flags, priority);
  return CUDAStream(handle, device_id);
}

}  // namespace evpool
