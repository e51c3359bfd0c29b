// evpool: CUDAEvent, the move-only owner of one cudaEvent_t that remembers its device.
//
// Remembering the device is what lets CUDAEventPool::Put file an event under the device it belongs
// to, instead of under whatever device happens to be current (the wrong-list bug of other pools).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <utility>

#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

/// Thread-safety: like any value, one object must not be used by two threads at once without
/// synchronisation; distinct objects are independent. Every member except Create, CreateWithFlags,
/// reset and the destructor (which call CUDA) is wait-free.
class EVPOOL_API CUDAEvent {
 public:
  /// An empty event.
  CUDAEvent() noexcept = default;

  /// Adopts `handle`, created on `device_id` (-1: unknown). Takes ownership: the handle is
  /// destroyed with this object.
  explicit CUDAEvent(cudaEvent_t handle, int device_id = -1) noexcept
      : handle_(handle), device_id_(handle ? device_id : -1) {}

  CUDAEvent(CUDAEvent &&other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_id_(std::exchange(other.device_id_, -1)) {}

  /// Destroys the event held so far (errors ignored, as in the destructor), then takes `other`'s.
  CUDAEvent &operator=(CUDAEvent &&other) noexcept {
    if (this != &other) {
      if (handle_) destroy_noexcept();
      handle_ = std::exchange(other.handle_, nullptr);
      device_id_ = std::exchange(other.device_id_, -1);
    }
    return *this;
  }

  /// Never throws. Errors of cudaEventDestroy are ignored: a destructor cannot report them, and
  /// while the runtime unloads at exit (cudaErrorCudartUnloading, which is also how the runtime
  /// reports the driver's CUDA_ERROR_DEINITIALIZED) they are expected. Call reset() to see them.
  ~CUDAEvent() {
    if (handle_) destroy_noexcept();  // inline test: a moved-from event costs no call
  }

  /// An event with flags cudaEventDisableTiming on `device_id` (-1: the current device).
  static CUDAEvent Create(int device_id = -1);

  /// An event with `flags` on `device_id` (-1: the calling thread's current device). The caller's
  /// current device is restored. Throws std::invalid_argument for flags CUDA would reject
  /// (unknown bits, or cudaEventInterprocess without cudaEventDisableTiming) and CUDAError when a
  /// CUDA call fails (for example cudaErrorInvalidDevice for a bad ordinal).
  static CUDAEvent CreateWithFlags(unsigned flags, int device_id = -1);

  cudaEvent_t get() const noexcept { return handle_; }
  /// The device the event was created on, or -1 if unknown (an adopted handle).
  int device_id() const noexcept { return device_id_; }
  operator cudaEvent_t() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /// Gives the handle up without destroying it; the event becomes empty.
  cudaEvent_t release() noexcept {
    device_id_ = -1;
    return std::exchange(handle_, nullptr);
  }

  /// Destroys the current handle, if any, and adopts `handle` of `device_id`. The new handle is
  /// adopted even if destroying the old one fails; then CUDAError is thrown, except for the
  /// errors of a runtime unloading at exit, which are ignored.
  void reset(cudaEvent_t handle = nullptr, int device_id = -1);

 private:
  void destroy_noexcept() noexcept;

  cudaEvent_t handle_ = nullptr;
  int device_id_ = -1;
};

}  // namespace evpool
