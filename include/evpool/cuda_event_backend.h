// evpool: CUDAEventBackend, the backend of real CUDA events (CUDAEventPool's).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "evpool/export.h"

namespace evpool {

/// Creates and destroys CUDA events through the CUDA runtime. Stateless; every copy is the same.
/// Every member is thread-safe (the CUDA runtime is).
struct EVPOOL_API CUDAEventBackend {
  using handle_type = cudaEvent_t;
  using options_type = unsigned;  // cudaEventCreateWithFlags' flags
  using owner_type = CUDAEvent;
  static constexpr unsigned kDefaultOptions = cudaEventDisableTiming;
  static constexpr const char *kHandleNoun = "event";  // in the pool's error messages

  /// std::invalid_argument for flags CUDA would reject.
  void validate_options(unsigned flags) const;
  /// A new event on `device` with flags that passed validate_options; the caller's current device
  /// is restored. Throws CUDAError.
  cudaEvent_t create(unsigned flags, int device);
  /// Destroys `handle`; errors are ignored (see CUDAEvent's destructor).
  void destroy(cudaEvent_t handle) noexcept;
  CUDAEvent adopt(cudaEvent_t handle, int device) noexcept { return CUDAEvent(handle, device); }
  /// cudaGetDeviceCount; throws CUDAError (no driver, no device).
  int device_count() const;
  /// cudaGetDevice; throws CUDAError.
  int current_device() const;
};

}  // namespace evpool
