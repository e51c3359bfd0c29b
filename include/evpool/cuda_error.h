// evpool: the exception thrown when a CUDA runtime call fails.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "evpool/export.h"

namespace evpool {

/// CUDA's description of `error` (cudaGetErrorString), except where the runtime found no driver
/// at all: CUDA then still says "CUDA driver version is insufficient for CUDA runtime version"
/// (cudaErrorInsufficientDriver), which reads as "upgrade your driver" on a machine that has
/// none, and this says "no CUDA driver was found (no GPU, or the driver is not installed)".
/// Thread-safe; one cudaDriverGetVersion call for that error. Throws only std::bad_alloc.
EVPOOL_API std::string describe_cuda_error(cudaError_t error);

/// A failed CUDA runtime call. `what()` names the call, the description of the error
/// (describe_cuda_error) and CUDA's name and number for it, for example "evpool: cudaSetDevice
/// failed: invalid device ordinal (cudaErrorInvalidDevice, 101)", or without a driver
/// "evpool: cudaGetDeviceCount failed: no CUDA driver was found (no GPU, or the driver is not
/// installed) (cudaErrorInsufficientDriver, 35)".
class EVPOOL_API CUDAError : public std::runtime_error {
 public:
  CUDAError(cudaError_t error, const char *call);

  /// The CUDA error code.
  cudaError_t error() const noexcept { return error_; }

 private:
  cudaError_t error_;
};

}  // namespace evpool
