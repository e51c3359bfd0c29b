// evpool: small pieces shared by the CUDA parts of the library. Private.
#pragma once

#include <cuda_runtime_api.h>

namespace evpool::detail {

/// Throws CUDAError naming `call` unless `error` is cudaSuccess.
void check_cuda(cudaError_t error, const char *call);

/// cudaGetDeviceCount, and cudaGetDevice of the calling thread: what every CUDA backend reports.
/// Throw CUDAError (no driver, no device).
int device_count();
int current_device();

/// cudaEventDestroy, with the errors of a runtime that is unloading at process exit mapped to
/// success: the driver reclaims the event then anyway.
cudaError_t destroy_event_tolerating_exit(cudaEvent_t handle) noexcept;

/// Throws std::invalid_argument, naming the flags, unless CUDA can create events with them.
void validate_event_flags(unsigned flags);

/// cudaEventCreateWithFlags on `device` (-1: the current one, which `device` then names on
/// return), with flags already validated; the caller's current device is restored. Throws
/// CUDAError.
cudaEvent_t create_event_on(int &device, unsigned flags);

/// cudaStreamDestroy, tolerating a runtime that is unloading, as destroy_event_tolerating_exit.
cudaError_t destroy_stream_tolerating_exit(cudaStream_t handle) noexcept;

/// Throws std::invalid_argument, naming the value and what CUDA accepts, unless `flags` is
/// cudaStreamDefault or cudaStreamNonBlocking and `priority` lies in the range that
/// cudaDeviceGetStreamPriorityRange reports for the current device (CUDA would clamp it
/// silently). Throws CUDAError if that range cannot be had.
void validate_stream_options(unsigned flags, int priority);

/// cudaStreamCreateWithPriority on `device` (-1: the current one, which `device` then names on
/// return), with options already validated; the caller's current device is restored. Throws
/// CUDAError.
cudaStream_t create_stream_on(int &device, unsigned flags, int priority);

}  // namespace evpool::detail
