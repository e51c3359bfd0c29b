// evpool: CUDAEventPool, a drop-in replacement for DALI's dali::CUDAEventPool.
//
// Same signature as DALI's, so that code written for it compiles unchanged once the namespace is
// evpool; underneath is BasicEventPool over CUDABackend (lock-free, one stack per device). One
// deliberate difference: Put with device -1 files the event under the device it was created on,
// not under the current device.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "evpool/basic_event_pool.h"
#include "evpool/cuda_backend.h"
#include "evpool/cuda_event.h"

namespace evpool {

extern template class BasicEventPool<CUDABackend>;

class CUDAEventPool {
 public:
  /// An empty pool for every visible device. Throws CUDAError where CUDA has no driver or no
  /// device, and std::invalid_argument for flags CUDA would reject.
  explicit CUDAEventPool(unsigned event_flags = cudaEventDisableTiming)
      : pool_(CUDABackend{}, event_flags) {}

  /// An idle event of `device_id` (-1: the current device), created if none is idle.
  /// Thread-safe; lock-free on a hit. See BasicEventPool::Get for the errors.
  CUDAEvent Get(int device_id = -1) { return pool_.Get(device_id); }

  /// Returns `event`, filed under `device_id` or, with -1, under the event's own device.
  /// Thread-safe; lock-free when a spare node exists. On any error the caller keeps the event.
  /// See BasicEventPool::Put.
  void Put(CUDAEvent &&event, int device_id = -1) { pool_.Put(std::move(event), device_id); }

  /// Destroys the idle events. Thread-safe, lock-free, never throws.
  void Purge() { pool_.Purge(); }

  /// The process-wide pool of cudaEventDisableTiming events, created on first use (thread-safe).
  /// It is never destroyed: threads may still use it while the process exits, and the driver
  /// reclaims its events then (PyTorch, RMM and kvikio leak their pools for the same reason).
  /// Throws CUDAError where CUDA has no driver or no device; a later call tries again.
  static CUDAEventPool &instance();

  int device_count() const noexcept { return pool_.device_count(); }

 private:
  BasicEventPool<CUDABackend> pool_;
};

}  // namespace evpool
