// evpool: the exception thrown when a CUDA runtime call fails.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/export.h"

namespace evpool {

/// A failed CUDA runtime call. `what()` names the call and CUDA's own description of the error,
/// for example "evpool: cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA
/// runtime version (cudaErrorInsufficientDriver, 35)".
class EVPOOL_API CUDAError : public std::runtime_error {
 public:
  CUDAError(cudaError_t error, const char *call);

  /// The CUDA error code.
  cudaError_t error() const noexcept { return error_; }

 private:
  cudaError_t error_;
};

}  // namespace evpool
