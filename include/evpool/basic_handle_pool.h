// evpool: BasicHandlePool, a lock-free pool of handles (CUDA events, CUDA streams) per device, over
// any backend.
//
// Design rationale
// ----------------
// This is the public face of detail::HandlePoolCore, where the algorithm and its reasoning live
// (per-thread caches of magazines in front of per-device lock-free depots; see
// detail/handle_pool_core.h). A lease may outlive its pool: the core then lives on until the last
// lease ends, without any shared reference count (leases are counted in the thread caches).
// CUDAEventPool is BasicHandlePool<CUDAEventBackend>, and CUDAStreamPool is
// BasicHandlePool<CUDAStreamBackend, StreamPoolPolicy>; tests and CPU benchmarks run the very same
// code over HostBackend and HostStreamBackend. A "handle" here is whatever the backend pools.
//
// Progress guarantees, stated per function below: Get and Put never wait for another thread
// (lock-free), except a thread's first call on a pool, which registers its cache under the pool's
// registry lock (and so may wait for a Purge or Trim in progress), and, under a cap, a Get at the
// cap, which waits for a handle to be idle (GetWithin bounds the wait; pool_cap.h). Purge and Trim are blocking:
// they take that lock and wait for any thread that is in the middle of a Get or Put on this pool
// to finish that call.
#pragma once

#include <chrono>
#include <cstddef>
#include <utility>

#include "evpool/detail/handle_pool_core.h"
#include "evpool/handle_backend.h"
#include "evpool/pool_cap.h"
#include "evpool/pool_checks.h"
#include "evpool/pool_policy.h"
#include "evpool/pool_stats.h"
#include "evpool/shared_lease.h"
#include "evpool/unique_lease.h"

namespace evpool {

/// No limit on idle handles per device.
inline constexpr std::size_t kUnlimitedIdle = detail::kUnlimitedIdle;

template <HandleBackend Backend, class Policy = DefaultPoolPolicy>
class BasicHandlePool {
  using Core = detail::HandlePoolCore<Backend, Policy>;

 public:
  using backend_type = Backend;
  using policy_type = Policy;
  using owner_type = typename Backend::owner_type;
  using handle_type = typename Backend::handle_type;
  using options_type = typename Backend::options_type;
  using unique_lease = UniqueLease<Core>;
  using shared_lease = SharedLease<Core>;

  /// An empty pool for the backend's devices, creating handles with `options` and keeping at
  /// most `max_idle_per_device` idle handles per device in its depots (a Put beyond that retires
  /// the handle; each thread's cache holds up to 2 x Policy::cache_capacity more per device),
  /// checking for misuse if `checks` or the environment say so (pool_checks.h), and letting at
  /// most `max_per_device` handles of a device exist through it at once, handed out, idle, busy or
  /// retired (pool_cap.h: what Get and Put do at the cap).
  /// Throws std::invalid_argument for options the backend rejects, a limit or cap of 0, or a
  /// value of EVPOOL_CHECKED other than 0 or 1, and whatever the backend throws when it cannot
  /// count its devices (CUDAError where CUDA has no driver or no device).
  explicit BasicHandlePool(Backend backend = Backend(), options_type options = Backend::kDefaultOptions,
                           std::size_t max_idle_per_device = kUnlimitedIdle, Checks checks = Checks::kDefault,
                           std::size_t max_per_device = kUncapped)
      : core_(new Core(std::move(backend), std::move(options), max_idle_per_device, checks, max_per_device)) {}

  BasicHandlePool(const BasicHandlePool &) = delete;
  BasicHandlePool &operator=(const BasicHandlePool &) = delete;

  /// Destroys every idle handle, in the depots and in every thread's cache (threads that hold a
  /// cache for this pool are not waited for, and free it later by themselves). If leases are
  /// still alive, the pool's state lives on until the last of them ends. Handles got with Get are
  /// their holders'; putting one back into a destroyed pool is undefined behaviour. Not
  /// thread-safe: no call on this pool may run concurrently, except leases ending.
  ~BasicHandlePool() { core_->close(); }

  /// Returns an idle handle of `device_id` (-1: the calling thread's current device), creating one
  /// with the pool's flags if none is idle. Served from the calling thread's cache; when that is
  /// empty, from the device's depot (a magazine at a time).
  /// Thread-safe. Lock-free when an idle handle exists (the thread's first call on this pool
  /// registers its cache under the registry lock, see above); a miss calls the backend's create,
  /// which may block inside the driver.
  /// Throws std::out_of_range for a device outside [0, device_count()), and whatever the backend's
  /// create throws; the pool is unchanged in both cases.
  /// Under a cap (pool_cap.h) the handle counts until it is put back; at the cap Get waits for one
  /// to be idle, for ever if none ever is (blocking): GetWithin is the bounded form.
  [[gnu::always_inline]] owner_type Get(int device_id = -1) { return core_->Get(device_id); }

  /// Get, waiting at most `patience` at the cap: then it throws CapReachedError (pool_cap.h), which
  /// names the device, the cap and how many of the device's handles this process holds. Without a
  /// cap, or below it, the same as Get. Thread-safety and progress as Get, but blocking at the cap
  /// for `patience` at most (a little more: the pause it is in, and the caches' flush, end first).
  /// Throws what Get throws, std::invalid_argument for a negative `patience`, and CapReachedError;
  /// the pool is unchanged then.
  owner_type GetWithin(std::chrono::nanoseconds patience, int device_id = -1) {
    return core_->GetWithin(patience, device_id);
  }

  /// Returns `handle` to the pool, filed under `device_id`; with -1, under the device the handle
  /// records, or the calling thread's current device for an adopted handle of unknown device.
  /// Beyond the idle limit the handle is retired instead: never destroyed here (see Trim).
  /// Thread-safe. Lock-free when a spare node exists; otherwise it allocates one node.
  /// Throws, before taking ownership (the caller still owns `handle`):
  /// - std::invalid_argument if `handle` is empty, or if `device_id` contradicts the handle's device;
  /// - std::out_of_range if the device is outside [0, device_count());
  /// - std::bad_alloc if no node can be allocated.
  /// In checked mode, throws DoublePutError (a std::invalid_argument) if the handle is already idle
  /// in the pool, or in another checked pool; then that pool keeps its copy and `handle` is emptied
  /// without being destroyed. Throws std::invalid_argument, before taking ownership, if another
  /// checked pool handed the handle out and has not had it back.
  /// Under a cap (pool_cap.h), a handle that records its device is taken for one this pool handed
  /// out (it counts already); a bare one is counted as PutForeign counts it, and refused as it is.
  [[gnu::always_inline]] void Put(owner_type &&handle, int device_id = -1) {
    core_->Put(std::move(handle), device_id);
  }

  /// Put of a handle this pool did not hand out (created elsewhere, or taken out of a lease with
  /// release()). Under a cap it takes a place (pool_cap.h); at the cap it is refused with
  /// CapReachedError before anything changed, and the caller still owns `handle`. Without a cap,
  /// the same as Put. Thread-safety, progress and the other errors as Put's; under a cap it also
  /// writes the device's count (one compare-exchange).
  void PutForeign(owner_type &&handle, int device_id = -1) {
    core_->PutForeign(std::move(handle), device_id);
  }

  /// Destroys every handle that is idle in the pool when it begins: in the depots and in every
  /// thread's cache, including caches of threads that are asleep. Exceptions: handles Put
  /// concurrently may stay, and so may the rest of a magazine that a concurrent Get (which
  /// bypasses its cache while Purge runs) had taken out of the depot at that moment.
  /// Thread-safe; may run concurrently with Get, Put and other Purges, which meanwhile bypass their
  /// caches. Blocking: takes the pool's registry lock and waits for threads that are in the middle
  /// of a call on this pool (never for idle ones); destroys handles through the backend (driver
  /// locks). Never throws.
  void Purge() noexcept { core_->Trim(0); }

  /// Like Purge, but keeps up to `keep_per_device` idle handles on each device (in the depot).
  /// Thread-safety and progress as Purge. Never throws.
  void Trim(std::size_t keep_per_device) noexcept { core_->Trim(keep_per_device); }

  /// Moves the calling thread's cached handles of this pool to the depots, where any thread's Get
  /// finds them (a thread does this by itself when it exits). For a thread that is about to sleep
  /// for long while others keep working. Thread-safe; lock-free apart from retiring handles over
  /// the idle limit. Never throws.
  void FlushThreadCache() noexcept { core_->FlushThreadCache(); }

  /// Creates `count` handles on `device` (-1: the current device) and puts them into the device's
  /// depot, not the caller's cache, in magazines of Policy::cache_start_capacity handles (a thread's
  /// cache takes one at a time), so that the first Gets of every thread hit while they last;
  /// schedulers call it before their first step. It creates only what fits under the idle limit
  /// beside the depot's idle handles, and stops there; a `count` over the limit itself is refused
  /// with std::invalid_argument before anything is created.
  /// Thread-safe; blocks in the backend's create. Throws what Get and Put throw; the handles
  /// reserved before a failure stay in the pool.
  void Reserve(int device, std::size_t count) { core_->Reserve(device, count); }

  /// A handle of `device_id` that goes back to this pool, under its own device, when the lease
  /// dies; the lease may outlive the pool (its handle is then retired, and destroyed by the deferred
  /// work: deferred_work.h). Goes through the thread
  /// caches as Get and Put do and writes no pool-wide word. Thread-safe; lock-free as Get and Put
  /// are. Throws what Get throws.
  unique_lease Lease(int device_id = -1) { return unique_lease(*core_, core_->begin_lease(device_id)); }

  /// Lease, bounded at the cap as GetWithin is. Throws what GetWithin throws.
  unique_lease LeaseWithin(std::chrono::nanoseconds patience, int device_id = -1) {
    return unique_lease(*core_, core_->begin_lease_within(patience, device_id));
  }

  /// A handle of `device_id` shared by every copy of the lease (a small control block counts the
  /// copies) and returned to this pool when the last copy dies; may outlive the pool like Lease.
  /// The block comes from the thread's cache when it holds one (a thread keeps the blocks of the
  /// shared leases it ended, up to 16, and hands each further 16 to the pool), else from the
  /// pool's spare blocks, else from `new`. Thread-safe; lock-free on a hit apart from allocating a
  /// block. Throws what Get throws, and std::bad_alloc.
  shared_lease LeaseShared(int device_id = -1) { return shared_lease::begin(*core_, device_id); }

  /// What the pool has done and holds, per device: handles created and destroyed, Gets that hit
  /// and missed, Puts (adopted handles apart), idle and outstanding handles; see pool_stats.h for
  /// each figure's meaning and the invariants that hold once no call is in progress.
  /// Thread-safe; blocking, like Trim: takes the registry lock and reads each thread's cache
  /// through the same handshake (waits for a thread in the middle of a call on this pool, never
  /// for an idle one; the calls meanwhile bypass the cache). Cheap to keep on: the counting costs
  /// Get and Put no shared write. Does not compile with a policy whose count_calls is false. Throws
  /// std::bad_alloc.
  PoolStats stats() const {
    static_assert(Policy::count_calls, "stats() needs a policy that counts (count_calls = true)");
    return core_->stats();
  }

  /// Whether the pool checks for misuse (pool_checks.h). Thread-safe, wait-free.
  bool checked() const noexcept { return core_->checked(); }

  /// Number of devices, fixed at construction. Thread-safe, wait-free.
  int device_count() const noexcept { return core_->device_count(); }

  /// The options handles are created with (CUDA events: their flags; CUDA streams: flags and
  /// priority). Thread-safe, wait-free.
  const options_type &options() const noexcept { return core_->options(); }

  /// The most idle handles kept per device (kUnlimitedIdle: no limit). Thread-safe, wait-free.
  std::size_t max_idle_per_device() const noexcept { return core_->max_idle_per_device(); }

  /// The most handles of a device that exist through the pool at once (kUncapped: no cap).
  /// Thread-safe, wait-free.
  std::size_t max_per_device() const noexcept { return core_->max_per_device(); }

  /// Magazine nodes allocated so far (each holds up to Policy::cache_capacity idle handles, or one
  /// without caches): the pool's bookkeeping memory, sizeof(Magazine) bytes a node, a multiple of
  /// 128. Thread-safe, wait-free.
  std::size_t node_count() const noexcept { return core_->node_count(); }

  /// The device's retired handles: over the idle limit, waiting to be handed out again or destroyed
  /// (stats()'s `retired`, without its lock). Exact once no call is in progress. Throws
  /// std::out_of_range for a device outside the pool. Thread-safe, wait-free.
  std::uint64_t retired_handles(int device_id) const { return core_->retired_handles(device_id); }

  /// The device's handles set aside busy: handed back with work pending, found so by a Get, and
  /// not yet found idle again (stats()'s `busy`, without its lock; always 0 where handles cannot be
  /// busy, as events). Exact once no call is in progress. Throws std::out_of_range for a device
  /// outside the pool. Thread-safe, wait-free.
  std::uint64_t busy_handles(int device_id) const { return core_->busy_handles(device_id); }

  /// On stderr, the handles still outstanding, in checked mode: for pools that are never
  /// destroyed, at exit (the process-wide pools call it then). Thread-safe; never throws.
  void report_outstanding_at_exit() noexcept { core_->report_outstanding(false); }

 private:
  Core *core_;
};

}  // namespace evpool
