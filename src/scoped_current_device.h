// evpool: switches the calling thread's current CUDA device for a scope. Private.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_runtime_helpers.h"

namespace evpool::detail {

// Makes `device` current for the scope of the object and restores the caller's device after.
// Skips both switches when `device` (or -1) is already current, so the common case costs one query.
class ScopedCurrentDevice {
 public:
  explicit ScopedCurrentDevice(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != -1 && device != previous_) {
      check_cuda(cudaSetDevice(device), "cudaSetDevice");
      switched_ = true;
    }
  }
  ScopedCurrentDevice(const ScopedCurrentDevice &) = delete;
  ScopedCurrentDevice &operator=(const ScopedCurrentDevice &) = delete;
  ~ScopedCurrentDevice() {
    if (switched_) cudaSetDevice(previous_);  // restoring a device that was current cannot fail
  }

  /// The device that was current when the scope began.
  int previous() const noexcept { return previous_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace evpool::detail
