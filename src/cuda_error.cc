#include "evpool/cuda_error.h"

#include <string>

namespace evpool {
namespace {

std::string describe(cudaError_t error, const char *call) {
  return std::string("evpool: ") + call + " failed: " + cudaGetErrorString(error) + " (" +
         cudaGetErrorName(error) + ", " + std::to_string(static_cast<int>(error)) + ")";
}

}  // namespace

CUDAError::CUDAError(cudaError_t error, const char *call)
    : std::runtime_error(describe(error, call)), error_(error) {}

}  // namespace evpool
