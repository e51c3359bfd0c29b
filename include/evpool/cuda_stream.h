// evpool: CUDAStream, the move-only owner of one cudaStream_t that remembers its device.
//
// DALI's dali::CUDAStream: a CUDAHandle (cuda_handle.h) of the stream kind, whose creators are
// here. It remembers its device as CUDAEvent does: CUDAStreamPool's Put files a stream under its
// own device without asking CUDA. A stream adopted from a bare handle records no device (-1); the
// pool then asks the stream itself (cudaStreamGetDevice), as DALI's pool does for every stream.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/cuda_error.h"
#include "evpool/cuda_handle.h"
#include "evpool/export.h"

namespace evpool {

/// The kind of CUDAStream: its handle and its creators, which CUDAStream inherits.
struct EVPOOL_API CUDAStreamKind {
  using handle_type = cudaStream_t;

  /// A stream on `device_id` (-1: the calling thread's current device), created with
  /// cudaStreamNonBlocking if `non_blocking` (it does not synchronise with the legacy default
  /// stream), else cudaStreamDefault. The caller's current device is restored. Throws CUDAError.
  static CUDAHandle<CUDAStreamKind> Create(bool non_blocking, int device_id = -1);

  /// As Create, with `priority` (lower numbers are greater priorities). Throws
  /// std::invalid_argument for a priority outside the range cudaDeviceGetStreamPriorityRange
  /// reports (CUDA would clamp it without a word), and CUDAError.
  static CUDAHandle<CUDAStreamKind> CreateWithPriority(bool non_blocking, int priority, int device_id = -1);
};

/// The owner of one stream; members as CUDAHandle says, creators as CUDAStreamKind says.
using CUDAStream = CUDAHandle<CUDAStreamKind>;

extern template class CUDAHandle<CUDAStreamKind>;  // in the library (src/cuda_handle.cc)

}  // namespace evpool
