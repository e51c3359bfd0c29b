#include "cuda_runtime_helpers.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "evpool/cuda_error.h"
#include "scoped_current_device.h"

namespace evpool::detail {

void check_cuda(cudaError_t error, const char *call) {
  if (error != cudaSuccess) {
    // Clear the runtime's last-error slot, so that this failure, already reported by the
    // exception, does not surface again in the caller's next cudaGetLastError.
    cudaGetLastError();
    throw CUDAError(error, call);
  }
}

int device_count() {
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

int current_device() {
  int device = -1;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

cudaError_t destroy_event_tolerating_exit(cudaEvent_t handle) noexcept {
  const cudaError_t error = cudaEventDestroy(handle);
  // The runtime API reports the driver's CUDA_ERROR_DEINITIALIZED as cudaErrorCudartUnloading.
  if (error == cudaErrorCudartUnloading) return cudaSuccess;
  return error;
}

void validate_event_flags(unsigned flags) {
  constexpr unsigned kKnown =
      cudaEventDefault | cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  auto reject = [flags](const char *why) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", flags);
    throw std::invalid_argument(std::string("evpool: event flags ") + hex + why);
  };
  if ((flags & ~kKnown) != 0)
    reject(" have bits outside cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess");
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0)
    reject(" have cudaEventInterprocess without cudaEventDisableTiming");
}

cudaEvent_t create_event_on(int &device, unsigned flags) {
  ScopedCurrentDevice scope(device);
  cudaEvent_t handle = nullptr;
  check_cuda(cudaEventCreateWithFlags(&handle, flags), "cudaEventCreateWithFlags");
  if (device == -1) device = scope.previous();
  return handle;
}

cudaError_t destroy_stream_tolerating_exit(cudaStream_t handle) noexcept {
  const cudaError_t error = cudaStreamDestroy(handle);
  if (error == cudaErrorCudartUnloading) return cudaSuccess;  // as for events, above
  return error;
}

void validate_stream_options(unsigned flags, int priority) {
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
    throw std::invalid_argument("evpool: stream flags " + std::to_string(flags) +
                                " are neither cudaStreamDefault (0) nor cudaStreamNonBlocking (1)");
  int least = 0, greatest = 0;
  check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  if (priority < greatest || priority > least)  // lower numbers are greater priorities
    throw std::invalid_argument("evpool: stream priority " + std::to_string(priority) +
                                " is outside the device's range [" + std::to_string(greatest) + ", " +
                                std::to_string(least) + "] (greatest to least)");
}

cudaStream_t create_stream_on(int &device, unsigned flags, int priority) {
  ScopedCurrentDevice scope(device);
  cudaStream_t handle = nullptr;
  check_cuda(cudaStreamCreateWithPriority(&handle, flags, priority), "cudaStreamCreateWithPriority");
  if (device == -1) device = scope.previous();
  return handle;
}

}  // namespace evpool::detail
