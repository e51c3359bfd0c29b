// evpool: CUDAStream, the move-only owner of one cudaStream_t that remembers its device.
//
// DALI's dali::CUDAStream, with the device remembered as CUDAEvent remembers it: CUDAStreamPool's
// Put files a stream under its own device without asking CUDA. A stream adopted from a bare
// handle records no device (-1); the pool then asks the stream itself (cudaStreamGetDevice), as
// DALI's pool does for every stream.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include <utility>

#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

/// Thread-safety: like any value, one object must not be used by two threads at once without
/// synchronisation; distinct objects are independent. Every member except Create,
/// CreateWithPriority, reset and the destructor (which call CUDA) is wait-free.
class EVPOOL_API CUDAStream {
 public:
  /// An empty stream.
  CUDAStream() noexcept = default;

  /// Adopts `handle`, created on `device_id` (-1: unknown). Takes ownership: the handle is
  /// destroyed with this object.
  explicit CUDAStream(cudaStream_t handle, int device_id = -1) noexcept
      : handle_(handle), device_id_(handle ? device_id : -1) {}

  CUDAStream(CUDAStream &&other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_id_(std::exchange(other.device_id_, -1)) {}

  /// Destroys the stream held so far (errors ignored, as in the destructor), then takes `other`'s.
  CUDAStream &operator=(CUDAStream &&other) noexcept {
    if (this != &other) {
      if (handle_) destroy_noexcept();
      handle_ = std::exchange(other.handle_, nullptr);
      device_id_ = std::exchange(other.device_id_, -1);
    }
    return *this;
  }

  /// Never throws; errors of cudaStreamDestroy are ignored, as CUDAEvent's destructor ignores
  /// cudaEventDestroy's. Work still pending on the stream completes: CUDA destroys the stream
  /// once it has.
  ~CUDAStream() {
    if (handle_) destroy_noexcept();
  }

  /// A stream on `device_id` (-1: the calling thread's current device), created with
  /// cudaStreamNonBlocking if `non_blocking` (it does not synchronise with the legacy default
  /// stream), else cudaStreamDefault. The caller's current device is restored. Throws CUDAError.
  static CUDAStream Create(bool non_blocking, int device_id = -1);

  /// As Create, with `priority` (lower numbers are greater priorities). Throws
  /// std::invalid_argument for a priority outside the range cudaDeviceGetStreamPriorityRange
  /// reports (CUDA would clamp it without a word), and CUDAError.
  static CUDAStream CreateWithPriority(bool non_blocking, int priority, int device_id = -1);

  cudaStream_t get() const noexcept { return handle_; }
  /// The device the stream was created on, or -1 if unknown (an adopted handle).
  int device_id() const noexcept { return device_id_; }
  operator cudaStream_t() const noexcept { return handle_; }  // NOLINT: DALI's conversion
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /// Gives the handle up without destroying it; the stream becomes empty.
  cudaStream_t release() noexcept {
    device_id_ = -1;
    return std::exchange(handle_, nullptr);
  }

  /// Destroys the current handle, if any, and adopts `handle` of `device_id`. The new handle is
  /// adopted even if destroying the old one fails; then CUDAError is thrown, except for the
  /// errors of a runtime unloading at exit, which are ignored.
  void reset(cudaStream_t handle = nullptr, int device_id = -1);

 private:
  void destroy_noexcept() noexcept;

  cudaStream_t handle_ = nullptr;
  int device_id_ = -1;
};

}  // namespace evpool
