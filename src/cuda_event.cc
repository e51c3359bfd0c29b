#include "evpool/cuda_event.h"

#include "cuda_runtime_helpers.h"

namespace evpool {
namespace {

// Makes `device` current for the scope of the object and restores the caller's device after.
// Skips both switches when `device` is already current, so the common case costs one query.
class ScopedCurrentDevice {
 public:
  explicit ScopedCurrentDevice(int device) {
    detail::check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != -1 && device != previous_) {
      detail::check_cuda(cudaSetDevice(device), "cudaSetDevice");
      switched_ = true;
    }
  }
  ScopedCurrentDevice(const ScopedCurrentDevice &) = delete;
  ScopedCurrentDevice &operator=(const ScopedCurrentDevice &) = delete;
  ~ScopedCurrentDevice() {
    if (switched_) cudaSetDevice(previous_);  // restoring a device that was current cannot fail
  }

  int previous() const noexcept { return previous_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace

CUDAEvent CUDAEvent::Create(int device_id) { return CreateWithFlags(cudaEventDisableTiming, device_id); }

CUDAEvent CUDAEvent::CreateWithFlags(unsigned flags, int device_id) {
  detail::validate_event_flags(flags);
  ScopedCurrentDevice scope(device_id);
  cudaEvent_t handle = nullptr;
  detail::check_cuda(cudaEventCreateWithFlags(&handle, flags), "cudaEventCreateWithFlags");
  return CUDAEvent(handle, device_id == -1 ? scope.previous() : device_id);
}

void CUDAEvent::reset(cudaEvent_t handle, int device_id) {
  const cudaEvent_t old = std::exchange(handle_, handle);
  device_id_ = handle ? device_id : -1;
  if (old) detail::check_cuda(detail::destroy_event_tolerating_exit(old), "cudaEventDestroy");
}

void CUDAEvent::destroy_noexcept() noexcept {
  if (handle_) detail::destroy_event_tolerating_exit(handle_);
  handle_ = nullptr;
  device_id_ = -1;
}

}  // namespace evpool
