#include "evpool/cuda_error.h"

#include <string>

namespace evpool {
namespace {

std::string describe(cudaError_t error, const char *call) {
  return std::string("evpool: ") + call + " failed: " + describe_cuda_error(error) + " (" +
         cudaGetErrorName(error) + ", " + std::to_string(static_cast<int>(error)) + ")";
}

}  // namespace

std::string describe_cuda_error(cudaError_t error) {
  if (error == cudaErrorInsufficientDriver) {
    // cudaDriverGetVersion succeeds with 0 "if no driver is installed" (CUDA's documentation):
    // the runtime could not load libcuda at all. A driver too old for the runtime reports its
    // version, and CUDA's own text is then the right one.
    int driver_version = -1;
    if (cudaDriverGetVersion(&driver_version) == cudaSuccess && driver_version == 0)
      return "no CUDA driver was found (no GPU, or the driver is not installed)";
  }
  return cudaGetErrorString(error);
}

CUDAError::CUDAError(cudaError_t error, const char *call)
    : std::runtime_error(describe(error, call)), error_(error) {}

}  // namespace evpool
