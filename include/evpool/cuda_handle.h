// evpool: CUDAHandle, the move-only owner of one CUDA handle that remembers its device.
//
// Design rationale
// ----------------
// CUDAEvent (cuda_event.h) and CUDAStream (cuda_stream.h), DALI's two owners, differ only in the
// handle they own, in how it is created and in how it is destroyed; so they are one template over
// a kind, as Chromium's ScopedGeneric is one owner over traits. A kind gives `handle_type` and its
// creators (CUDAEventKind: Create, CreateWithFlags; CUDAStreamKind: Create, CreateWithPriority),
// which the owner inherits, so that `CUDAEvent::Create()` and `CUDAStream::Create(true)` are
// written as in DALI. The kind is an empty base: an owner is a handle and a device, nothing more.
// Destroying is the library's (src/cuda_handle.cc), where both owners are instantiated once.
//
// Remembering the device is what lets a pool's Put file a handle under the device it belongs to,
// instead of under whatever device happens to be current (the wrong-list bug of other pools).
#pragma once

#include <utility>

#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

/// Thread-safety: like any value, one object must not be used by two threads at once without
/// synchronisation; distinct objects are independent. Every member except the kind's creators,
/// reset and the destructor (which call CUDA) is wait-free.
template <class Kind>
class EVPOOL_API CUDAHandle : public Kind {
 public:
  using handle_type = typename Kind::handle_type;

  /// An empty owner.
  CUDAHandle() noexcept = default;

  /// Adopts `handle`, created on `device_id` (-1: unknown). Takes ownership: the handle is
  /// destroyed with this object.
  explicit CUDAHandle(handle_type handle, int device_id = -1) noexcept
      : handle_(handle), device_id_(handle ? device_id : -1) {}

  CUDAHandle(CUDAHandle &&other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_id_(std::exchange(other.device_id_, -1)) {}

  /// Destroys the handle held so far (errors ignored, as in the destructor), then takes `other`'s.
  CUDAHandle &operator=(CUDAHandle &&other) noexcept {
    if (this != &other) {
      if (handle_) destroy_noexcept();
      handle_ = std::exchange(other.handle_, nullptr);
      device_id_ = std::exchange(other.device_id_, -1);
    }
    return *this;
  }

  /// Never throws. Errors of cudaEventDestroy or cudaStreamDestroy are ignored: a destructor cannot
  /// report them, and while the runtime unloads at exit (cudaErrorCudartUnloading, which is also
  /// how the runtime reports the driver's CUDA_ERROR_DEINITIALIZED) they are expected. Call reset()
  /// to see them. Work still pending on a stream completes: CUDA destroys the stream once it has.
  ~CUDAHandle() {
    if (handle_) destroy_noexcept();  // inline test: a moved-from owner costs no call
  }

  handle_type get() const noexcept { return handle_; }
  /// The device the handle was created on, or -1 if unknown (an adopted handle).
  int device_id() const noexcept { return device_id_; }
  operator handle_type() const noexcept { return handle_; }  // NOLINT: DALI's conversion
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /// Gives the handle up without destroying it; the owner becomes empty.
  handle_type release() noexcept {
    device_id_ = -1;
    return std::exchange(handle_, nullptr);
  }

  /// Destroys the current handle, if any, and adopts `handle` of `device_id`. The new handle is
  /// adopted even if destroying the old one fails; then CUDAError is thrown, except for the
  /// errors of a runtime unloading at exit, which are ignored. Throws std::invalid_argument,
  /// naming it, for the handle this owner holds already (destroying it and keeping it would leave
  /// the owner with a destroyed handle); nothing changes then.
  void reset(handle_type handle = nullptr, int device_id = -1);

 private:
  void destroy_noexcept() noexcept;

  handle_type handle_ = nullptr;
  int device_id_ = -1;
};

}  // namespace evpool
