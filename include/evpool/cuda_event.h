// evpool: CUDAEvent, the move-only owner of one cudaEvent_t that remembers its device.
//
// DALI's dali::CUDAEvent: a CUDAHandle (cuda_handle.h) of the event kind, whose creators are
// here. Remembering the device is what lets CUDAEventPool::Put file an event under the device it
// belongs to, instead of under whatever device happens to be current.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/cuda_error.h"
#include "evpool/cuda_handle.h"
#include "evpool/export.h"

namespace evpool {

/// The kind of CUDAEvent: its handle and its creators, which CUDAEvent inherits.
struct EVPOOL_API CUDAEventKind {
  using handle_type = cudaEvent_t;

  /// An event with flags cudaEventDisableTiming on `device_id` (-1: the current device).
  static CUDAHandle<CUDAEventKind> Create(int device_id = -1);

  /// An event with `flags` on `device_id` (-1: the calling thread's current device). The caller's
  /// current device is restored. Throws std::invalid_argument for flags CUDA would reject
  /// (unknown bits, or cudaEventInterprocess without cudaEventDisableTiming) and CUDAError when a
  /// CUDA call fails (for example cudaErrorInvalidDevice for a bad ordinal).
  static CUDAHandle<CUDAEventKind> CreateWithFlags(unsigned flags, int device_id = -1);
};

/// The owner of one event; members as CUDAHandle says, creators as CUDAEventKind says.
using CUDAEvent = CUDAHandle<CUDAEventKind>;

extern template class CUDAHandle<CUDAEventKind>;  // in the library (src/cuda_handle.cc)

}  // namespace evpool
