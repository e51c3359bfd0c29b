// evpool: CUDAEventPool, a drop-in replacement for DALI's dali::CUDAEventPool.
//
// Same signature as DALI's (constructor, Get, Put, Purge, instance()), so that code written for it
// compiles unchanged once the namespace is evpool; underneath is BasicHandlePool over CUDAEventBackend
// (lock-free, one stack per device), with its extras: Reserve, Trim, an idle limit, leases. One
// deliberate difference: Put with device -1 files the event under the device it was created on,
// not under the current device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <stdexcept>

#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "evpool/export.h"

namespace evpool {

class EVPOOL_API CUDAEventPool : public BasicHandlePool<CUDAEventBackend> {
 public:
  /// An empty pool for every visible device, creating events with `event_flags` and keeping at
  /// most `max_idle_per_device` idle events per device, checking for misuse if `checks` or the
  /// environment (EVPOOL_CHECKED=1) say so (pool_checks.h). Throws CUDAError where CUDA has no
  /// driver or no device, and std::invalid_argument for flags CUDA would reject, a limit of 0, or
  /// a value of EVPOOL_CHECKED other than 0 or 1.
  explicit CUDAEventPool(unsigned event_flags = cudaEventDisableTiming,
                         std::size_t max_idle_per_device = kUnlimitedIdle, Checks checks = Checks::kDefault)
      : BasicHandlePool(CUDAEventBackend{}, event_flags, max_idle_per_device, checks) {}

  /// The process-wide pool of cudaEventDisableTiming events, created on first use (thread-safe).
  /// It is never destroyed: threads may still use it while the process exits, and the driver
  /// reclaims its events then (PyTorch, RMM and kvikio leak their pools for the same reason). In
  /// checked mode (EVPOOL_CHECKED=1) it reports the events still outstanding at exit.
  /// Throws CUDAError where CUDA has no driver or no device; a later call tries again.
  static CUDAEventPool &instance();

  /// The process-wide pool of events with `event_flags` (for example cudaEventDefault for timing
  /// events, or cudaEventBlockingSync), created on first use; instance() is
  /// instance_for(cudaEventDisableTiming). Thread-safe; never destroyed. Throws
  /// std::invalid_argument for flags CUDA would reject, and CUDAError as instance() does.
  static CUDAEventPool &instance_for(unsigned event_flags);

  /// The flags events are created with. Thread-safe, wait-free.
  unsigned event_flags() const noexcept { return options(); }
};

}  // namespace evpool
