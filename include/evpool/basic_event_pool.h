// evpool: BasicEventPool, a lock-free pool of events with one stack per device, over any backend.
//
// Design rationale
// ----------------
// This is the public face of detail::EventPoolCore, where the algorithm and its reasoning live
// (per-device tagged Treiber stacks over a node arena; see detail/event_pool_core.h). The pool
// object owns one reference to its core; leases own others, so a lease that outlives its pool
// still has a core to return its event to (the core, with its idle events, dies with the last
// lease). CUDAEventPool is BasicEventPool<CUDABackend>; tests and CPU benchmarks run the very same
// code over HostBackend.
#pragma once

#include <cstddef>
#include <utility>

#include "evpool/detail/event_pool_core.h"
#include "evpool/event_backend.h"
#include "evpool/pool_policy.h"
#include "evpool/shared_event_lease.h"
#include "evpool/unique_event_lease.h"

namespace evpool {

/// No limit on idle events per device.
inline constexpr std::size_t kUnlimitedIdle = detail::kUnlimitedIdle;

template <EventBackend Backend, class Policy = DefaultPoolPolicy>
class BasicEventPool {
  using Core = detail::EventPoolCore<Backend, Policy>;

 public:
  using backend_type = Backend;
  using event_type = typename Backend::event_type;
  using handle_type = typename Backend::handle_type;
  using unique_lease = UniqueEventLease<Core>;
  using shared_lease = SharedEventLease<Core>;

  /// An empty pool for the backend's devices, creating events with `event_flags` and keeping at
  /// most `max_idle_per_device` idle events per device (a Put beyond that destroys the event).
  /// Throws std::invalid_argument for flags the backend rejects or a limit of 0, and whatever the
  /// backend throws when it cannot count its devices (CUDAError where CUDA has no driver or no
  /// device).
  explicit BasicEventPool(Backend backend = Backend(), unsigned event_flags = Backend::kDefaultFlags,
                          std::size_t max_idle_per_device = kUnlimitedIdle)
      : core_(new Core(std::move(backend), event_flags, max_idle_per_device)) {}

  BasicEventPool(const BasicEventPool &) = delete;
  BasicEventPool &operator=(const BasicEventPool &) = delete;

  /// Destroys every idle event, unless leases are still alive: then the pool's state lives on
  /// until the last of them is gone. Events got with Get are their holders'; putting one back
  /// into a destroyed pool is undefined behaviour. Not thread-safe: no call on this pool may run
  /// concurrently.
  ~BasicEventPool() { core_->release_reference(); }

  /// Returns an idle event of `device_id` (-1: the calling thread's current device), creating one
  /// with the pool's flags if none is idle.
  /// Thread-safe. Lock-free when an idle event exists; a miss calls the backend's create, which
  /// may block inside the driver.
  /// Throws std::out_of_range for a device outside [0, device_count()), and whatever the backend's
  /// create throws; the pool is unchanged in both cases.
  event_type Get(int device_id = -1) { return core_->Get(device_id); }

  /// Returns `event` to the pool, filed under `device_id`; with -1, under the device the event
  /// records, or the calling thread's current device for an adopted event of unknown device.
  /// Beyond the idle limit the event is destroyed instead.
  /// Thread-safe. Lock-free when a spare node exists; otherwise it allocates one node.
  /// Throws, before taking ownership (the caller still owns `event`):
  /// - std::invalid_argument if `event` is empty, or if `device_id` contradicts the event's device;
  /// - std::out_of_range if the device is outside [0, device_count());
  /// - std::bad_alloc if no node can be allocated.
  void Put(event_type &&event, int device_id = -1) { core_->Put(std::move(event), device_id); }

  /// Destroys the events that are idle in the pool. Events Put concurrently with a Purge may stay.
  /// Thread-safe and lock-free; may run concurrently with Get, Put and other Purges. Never throws.
  void Purge() noexcept { core_->Trim(0); }

  /// Destroys idle events until at most `keep_per_device` remain idle on each device (the most
  /// recently put ones). While it runs, concurrent Gets may miss and create.
  /// Thread-safe and lock-free. Never throws.
  void Trim(std::size_t keep_per_device) noexcept { core_->Trim(keep_per_device); }

  /// Creates `count` events on `device` (-1: the current device) and puts them into the pool, so
  /// that the first `count` Gets hit; schedulers call it before their first step. Events beyond
  /// the idle limit are destroyed again.
  /// Thread-safe; blocks in the backend's create. Throws what Get and Put throw; the events
  /// reserved before a failure stay in the pool.
  void Reserve(int device, std::size_t count) { core_->Reserve(device, count); }

  /// An event of `device_id` that goes back to this pool, under its own device, when the lease
  /// dies. Thread-safe; lock-free as Get and Put are. Throws what Get throws.
  unique_lease Lease(int device_id = -1) { return unique_lease(*core_, core_->Get(device_id)); }

  /// An event of `device_id` shared by every copy of the lease (copies count references in the
  /// event's pool node, not in a separately allocated control block) and returned to this pool
  /// when the last copy dies. Thread-safe; lock-free on a hit. Throws what Get throws.
  shared_lease LeaseShared(int device_id = -1) {
    return shared_lease(*core_, core_->lease_node(device_id));
  }

  /// Number of devices, fixed at construction. Thread-safe, wait-free.
  int device_count() const noexcept { return core_->device_count(); }

  /// The flags events are created with. Thread-safe, wait-free.
  unsigned event_flags() const noexcept { return core_->event_flags(); }

  /// The most idle events kept per device (kUnlimitedIdle: no limit). Thread-safe, wait-free.
  std::size_t max_idle_per_device() const noexcept { return core_->max_idle_per_device(); }

  /// Nodes allocated so far: the most events that were ever idle or shared-leased at once, which
  /// bounds the pool's bookkeeping memory (128 bytes a node). Thread-safe, wait-free.
  std::size_t node_count() const noexcept { return core_->node_count(); }

 private:
  Core *core_;
};

}  // namespace evpool
