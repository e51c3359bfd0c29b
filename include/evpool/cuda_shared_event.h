// evpool: CUDASharedEvent, a drop-in replacement for DALI's dali::CUDASharedEvent.
//
// Design rationale
// ----------------
// DALI's class is a std::shared_ptr<void> around the handle whose deleter Puts the event back into
// a pool captured by pointer: every GetFromPool allocates a control block holding a type-erased
// deleter, and a copy that outlives its pool Puts into a destroyed one. Here an event got from a
// pool is a SharedLease (shared_lease.h) and nothing else: the lease's own count is the
// reference count (no second control block, no deleter), and the event goes back to its pool when
// the last copy dies, or is destroyed if the pool is gone by then. Events that belong to no pool
// (Create, or a handle with a caller's deleter) keep DALI's representation, a std::shared_ptr<void>
// that runs the deleter; those are rare and made by hand.
//
// Same interface as DALI's: code that uses dali::CUDASharedEvent compiles unchanged once the
// namespace is evpool.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>

#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"

namespace evpool {

/// Thread-safety: as std::shared_ptr: distinct copies may be used and destroyed by any threads at
/// once; one object must not be used by two threads at once without synchronisation. Copying and
/// dropping a copy are lock-free (one atomic read-modify-write); the last copy's return to the
/// pool is as lock-free as Put.
class CUDASharedEvent {
 public:
  /// An empty shared event (get() == nullptr, use_count() == 0).
  CUDASharedEvent() noexcept = default;

  /// Shares `event`, belonging to no pool: the last copy calls `deleter(event)`. If the count
  /// cannot be allocated, `deleter(event)` runs at once and std::bad_alloc is thrown.
  template <class EventDeleter>
  CUDASharedEvent(cudaEvent_t event, EventDeleter &&deleter)
      : unpooled_(event, [deleter = std::forward<EventDeleter>(deleter)](void *handle) mutable {
          deleter(static_cast<cudaEvent_t>(handle));
        }) {}

  /// Shares `event`, belonging to no pool: the last copy destroys it.
  explicit CUDASharedEvent(CUDAEvent event)
      // release() first: if the count cannot be allocated, shared_ptr runs the deleter at once,
      // and the handle must not be destroyed a second time by `event`.
      : CUDASharedEvent(event.release(), [](cudaEvent_t handle) { CUDAEvent destroyed(handle); }) {}

  /// Shares `event`, belonging to no pool: the last copy calls `deleter(event.get())`.
  template <class EventDeleter>
  explicit CUDASharedEvent(CUDAEvent event, EventDeleter &&deleter)
      : CUDASharedEvent(event.release(), std::forward<EventDeleter>(deleter)) {}

  /// An event of `device_id` (-1: the calling thread's current device) from `pool`, returned to
  /// it when the last copy dies, under the device it was created on. The copies may outlive the
  /// pool (the event is then destroyed). Throws what CUDAEventPool::LeaseShared throws.
  static CUDASharedEvent GetFromPool(CUDAEventPool &pool, int device_id = -1) {
    return CUDASharedEvent(pool.LeaseShared(device_id));
  }

  /// As above, from the process-wide CUDAEventPool::instance().
  static CUDASharedEvent GetFromPool(int device_id = -1) {
    return GetFromPool(CUDAEventPool::instance(), device_id);
  }

  /// A new event of `device_id` (-1: the current device) with flags cudaEventDisableTiming,
  /// belonging to no pool: the last copy destroys it. Throws what CUDAEvent::Create throws.
  static CUDASharedEvent Create(int device_id = -1) { return CUDASharedEvent(CUDAEvent::Create(device_id)); }

  /// Drops this copy's share; the last copy returns or destroys the event. Never throws.
  void reset() noexcept {
    pooled_.reset();
    unpooled_.reset();
  }

  cudaEvent_t get() const noexcept {
    return pooled_ ? pooled_.get() : static_cast<cudaEvent_t>(unpooled_.get());
  }
  operator cudaEvent_t() const noexcept { return get(); }  // NOLINT: as DALI's
  explicit operator bool() const noexcept { return get() != nullptr; }

  /// How many copies share the event (0 when empty). A snapshot, as std::shared_ptr::use_count.
  long use_count() const noexcept {  // NOLINT(runtime/int): DALI's type
    return pooled_ ? pooled_.use_count() : unpooled_.use_count();
  }

  // Equality compares the handles, as DALI's. C++20 derives != and the reversed forms.
  bool operator==(const CUDASharedEvent &other) const noexcept { return get() == other.get(); }
  bool operator==(cudaEvent_t event) const noexcept { return get() == event; }
  bool operator==(std::nullptr_t) const noexcept { return get() == nullptr; }

 private:
  explicit CUDASharedEvent(CUDAEventPool::shared_lease lease) noexcept : pooled_(std::move(lease)) {}

  // At most one of the two is non-empty.
  CUDAEventPool::shared_lease pooled_;
  std::shared_ptr<void> unpooled_;
};

}  // namespace evpool
