// evpool: CUDAStreamPool and CUDAStreamLease, a drop-in replacement for DALI's dali::CUDAStreamPool.
//
// Same signature as DALI's (Get returns a lease, Put, Purge, instance()), so that code written
// for it compiles once the namespace is evpool. Underneath is the core of CUDAEventPool too,
// BasicHandlePool, over CUDAStreamBackend: per-thread caches in front of lock-free per-device
// depots, leases that may outlive their pool, Reserve, Trim, an idle limit, stats, checked mode,
// fork and exit safety. What streams add:
// - a stream is leased exclusively: no other caller gets it until its lease ends, so one
//   caller's work never queues behind another's (a round-robin pool, PyTorch's or RMM's, hands
//   the same stream to many callers at once);
// - Get never hands out a stream whose work is still pending: it asks (a driver query) the
//   thread's newest cached stream (unless its holder handed it back known idle, through
//   synchronize_and_reset), then the oldest of each of its magazines, then the depot's,
//   where the busy streams it meets are set aside and asked again when nothing else is idle, and
//   creates only when every stream of the depot and set aside is busy (detail/handle_pool_core.h,
//   take_older_or_bypass; detail/device_depots.h, take_idle). Asking is serialised in the driver
//   (cuda_stream_backend.h): a pool built with StreamReuse::kAtOnce asks nothing, for callers
//   that hand their streams back synchronised.
// - a cap per device bounds the streams the pool keeps (pool_cap.h).
// - pools are keyed by flags and priority (instance_for), as event pools by flags.
// Deliberate differences from DALI: a lease may outlive its pool (DALI asserts it does not);
// Put with device -1 files a CUDAStream under the device it was created on, and asks CUDA
// (cudaStreamGetDevice) only for an adopted handle; a Put of a stream whose device contradicts
// `device_id` is refused (DALI documents it as corrupting the pool).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_stream.h"
#include "evpool/cuda_stream_backend.h"
#include "evpool/export.h"

namespace evpool {

class CUDAStreamPool;

/// A stream leased from a CUDAStreamPool, returned to it (under its own device) when the lease
/// ends. Move-only. May outlive its pool: the stream is then retired, and destroyed by the
/// deferred work (deferred_work.h). Thread-safety: like any value; distinct leases may be used
/// and ended by any threads at once.
class EVPOOL_API CUDAStreamLease {
 public:
  CUDAStreamLease() noexcept = default;
  CUDAStreamLease(CUDAStreamLease &&other) noexcept
      : lease_(std::move(other.lease_)), pool_(std::exchange(other.pool_, nullptr)) {}
  /// Ends the lease held so far, then takes `other`'s.
  CUDAStreamLease &operator=(CUDAStreamLease &&other) noexcept {
    if (this != &other) {
      lease_ = std::move(other.lease_);
      pool_ = std::exchange(other.pool_, nullptr);
    }
    return *this;
  }

  cudaStream_t get() const noexcept { return lease_.get(); }
  operator cudaStream_t() const noexcept { return lease_.get(); }  // NOLINT: DALI's conversion
  explicit operator bool() const noexcept { return static_cast<bool>(lease_); }
  /// The device of the stream, or -1 for an empty lease.
  int device_id() const noexcept { return lease_.device_id(); }
  /// The pool the stream came from (nullptr for an empty lease). A lease may outlive its pool:
  /// the pointer is then dangling, and only comparing it is defined.
  CUDAStreamPool *pool() const noexcept { return pool_; }

  /// Takes the stream out of the lease; the caller owns it and the pool forgets it.
  CUDAStream release() noexcept {
    pool_ = nullptr;
    return lease_.release();
  }

  /// Returns the stream to its pool now. Never throws and makes no CUDA call: if the pool cannot
  /// take it (it is gone, or over its idle limit), the stream is retired. A stream leased before
  /// fork() is forgotten in the child, not returned.
  void reset() noexcept {
    pool_ = nullptr;
    lease_.reset();
  }

  /// Waits for the work enqueued on the stream so far (cudaStreamSynchronize), then returns the
  /// stream to its pool as reset() does, known to be idle: this thread's next Get of the device
  /// takes it without asking the driver, unless anything else reached the top of this thread's
  /// cache in between (UniqueLease::reset_known_idle lists what). So a holder that synchronises
  /// anyway pays no query for its next stream (docs/streams.md, "What asking costs"). Throws
  /// CUDAError if the synchronisation fails (an error of the stream's work, or a stream being
  /// captured); the lease then still holds the stream. Nothing for an empty lease. In a fork
  /// child, a lease begun in the parent is only forgotten, as reset() does, without a CUDA call.
  /// Thread-safety: as reset(); blocks until the stream's work is done.
  void synchronize_and_reset();

 private:
  friend class CUDAStreamPool;
  using Lease = BasicHandlePool<CUDAStreamBackend, StreamPoolPolicy>::unique_lease;
  CUDAStreamLease(Lease &&lease, CUDAStreamPool *pool) noexcept : lease_(std::move(lease)), pool_(pool) {}

  Lease lease_;
  CUDAStreamPool *pool_ = nullptr;
};

/// Each function's thread-safety, progress and errors are BasicHandlePool's (basic_handle_pool.h),
/// with "handle" read as "stream"; what differs is said here.
class EVPOOL_API CUDAStreamPool : private BasicHandlePool<CUDAStreamBackend, StreamPoolPolicy> {
  using Base = BasicHandlePool<CUDAStreamBackend, StreamPoolPolicy>;

 public:
  /// An empty pool for every visible device, creating streams with `stream_flags`
  /// (cudaStreamNonBlocking, as DALI's, or cudaStreamDefault) and `priority`, keeping at most
  /// `max_idle_per_device` idle streams per device, handing a stream out again as `reuse` says, and
  /// letting at most `max_per_device` streams of a device exist through it at once, leased, idle,
  /// busy or retired (pool_cap.h).
  /// Throws CUDAError where CUDA has no driver or no device, and std::invalid_argument for
  /// other flags, a priority outside the device's range, a limit or cap of 0, or a value of
  /// EVPOOL_CHECKED other than 0 or 1.
  explicit CUDAStreamPool(unsigned stream_flags = cudaStreamNonBlocking, int priority = 0,
                          std::size_t max_idle_per_device = kUnlimitedIdle, Checks checks = Checks::kDefault,
                          StreamReuse reuse = StreamReuse::kWhenIdle, std::size_t max_per_device = kUncapped)
      : Base(CUDAStreamBackend{reuse}, StreamOptions{stream_flags, priority}, max_idle_per_device, checks,
             max_per_device),
        reuse_(reuse) {}

  /// An exclusive lease of an idle stream of `device_id` (-1: the calling thread's current
  /// device), created if none is idle. With StreamReuse::kWhenIdle no work is pending on the
  /// stream when Get returns (see the header's comment); with kAtOnce, whatever its last holder
  /// left queued may still be. The caller may assume nothing else about it (its last holder may
  /// have left it in any state CUDA allows, for example with an attribute changed).
  /// Thread-safe. Lock-free when an idle stream exists in the thread's cache or the depot, apart
  /// from its query (or a few: the driver serialises them); otherwise it may wait for another
  /// thread's sweep of the streams set aside busy (a few queries), and a miss calls
  /// cudaStreamCreateWithPriority. At the cap it waits for a busy stream of the pool's to
  /// complete or one to be handed back (blocking, as on a semaphore, for ever if none ever is;
  /// pool_cap.h): GetWithin is the bounded form. Throws std::out_of_range for a device outside
  /// [0, device_count()) and CUDAError; then the pool is unchanged.
  CUDAStreamLease Get(int device_id = -1) { return CUDAStreamLease(Base::Lease(device_id), this); }

  /// Get, waiting at most `patience` at the cap; then it throws CapReachedError, naming the
  /// device, the cap and how many of the device's streams this process holds
  /// (BasicHandlePool::GetWithin). Without a cap, the same as Get.
  CUDAStreamLease GetWithin(std::chrono::nanoseconds patience, int device_id = -1) {
    return CUDAStreamLease(Base::LeaseWithin(patience, device_id), this);
  }

  /// Returns `stream` to the pool, filed under `device_id`; with -1, under the device the stream
  /// was created on, or, for an adopted handle, the device cudaStreamGetDevice names. Work may
  /// still be pending on it: Get will not hand it out until that work is done. A stream must not
  /// be handed back while it is being captured. Get hands out leases, so every stream Put here
  /// comes from outside the pool (or out of a lease, through release()): under a cap it takes a
  /// place, and at the cap it is refused (BasicHandlePool::PutForeign; pool_cap.h).
  /// Throws, before taking ownership (the caller still owns `stream`), std::invalid_argument for an
  /// empty stream or a `device_id` that contradicts the stream's device, CapReachedError at the
  /// cap, and what BasicHandlePool::Put throws.
  void Put(CUDAStream &&stream, int device_id = -1) { Base::PutForeign(std::move(stream), device_id); }

  using Base::checked;
  using Base::device_count;
  using Base::FlushThreadCache;
  using Base::max_idle_per_device;
  using Base::max_per_device;
  using Base::node_count;
  using Base::Purge;
  using Base::report_outstanding_at_exit;
  using Base::Reserve;
  using Base::stats;
  using Base::Trim;

  /// The device's retired streams (BasicHandlePool::retired_handles). Thread-safe, wait-free.
  std::uint64_t retired_streams(int device_id) const { return Base::retired_handles(device_id); }

  /// The flags and priority streams are created with, and when they are handed out again.
  /// Thread-safe, wait-free.
  unsigned stream_flags() const noexcept { return options().flags; }
  int priority() const noexcept { return options().priority; }
  StreamReuse reuse() const noexcept { return reuse_; }

  /// The process-wide pool of cudaStreamNonBlocking streams of priority 0, created on first use
  /// (thread-safe) and never destroyed, as CUDAEventPool::instance(); in checked mode it reports
  /// the streams still outstanding at exit. Throws CUDAError where CUDA has no driver or no
  /// device; a later call tries again.
  static CUDAStreamPool &instance();

  /// The process-wide pool of streams with `stream_flags` and `priority`; instance() is
  /// instance_for(cudaStreamNonBlocking, 0). Thread-safe; never destroyed. Throws
  /// std::invalid_argument for flags or a priority that the constructor refuses, and CUDAError as
  /// instance() does.
  static CUDAStreamPool &instance_for(unsigned stream_flags, int priority = 0);

 private:
  StreamReuse reuse_;
};

}  // namespace evpool
