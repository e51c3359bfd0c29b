// Whether this machine can run CUDA, and why not, for tests that need a GPU or its absence.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "evpool/cuda_error.h"

namespace evpool::testing_support {

struct CudaAvailability {
  int devices = 0;
  std::string why_not;  // empty when at least one device is usable
};

inline CudaAvailability cuda_availability() {
  CudaAvailability result;
  const cudaError_t error = cudaGetDeviceCount(&result.devices);
  if (error != cudaSuccess) {
    cudaGetLastError();
    result.devices = 0;
    result.why_not = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(error) + ": " +
                     evpool::describe_cuda_error(error);
  } else if (result.devices == 0) {
    result.why_not = "no CUDA device is visible";
  }
  return result;
}

}  // namespace evpool::testing_support

#define EVPOOL_REQUIRE_GPU()                                                                \
  do {                                                                                      \
    const auto availability = ::evpool::testing_support::cuda_availability();               \
    if (availability.devices == 0) GTEST_SKIP() << "needs a GPU: " << availability.why_not; \
  } while (false)

#define EVPOOL_REQUIRE_NO_GPU()                                                              \
  do {                                                                                       \
    if (::evpool::testing_support::cuda_availability().devices > 0)                          \
      GTEST_SKIP() << "checks the behaviour without a usable GPU, and this machine has one"; \
  } while (false)
