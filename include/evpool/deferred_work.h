// evpool: work that pools defer to a thread that may call the driver.
//
// Design rationale
// ----------------
// Some ends come on threads where CUDA forbids CUDA calls: a graph user object's destructor runs
// on a CUDA thread (graph_event.h), as may a host function that ends a lease. What must happen
// there is reduced to one lock-free push of a node that the deferring object already owns (so
// the push needs no memory and cannot fail), onto one process-wide list; the work itself runs on
// the next call that may call the driver anyway:
//
//   graph-owned events        return to their pools (the lease each holds ends)
//   pools destroyed while     their last lease has ended: their retired handles are destroyed
//   leases were out           and their state freed
//
// run_deferred_work() runs it, and so do every pool's stats(), Trim, Purge, and a Get off its fast
// path (one that refills its thread's cache, or goes around it: every Get of a pool without
// caches). So a Get of one pool may run what another deferred, such as the end of a pool
// destroyed while leases were out, which destroys that pool's handles. Pushes and the taking of the whole list are
// compare-exchange and exchange on one word: a list taken whole is never popped node by node, so
// the head has no ABA. What is still deferred when the process exits stays undone, as the
// process-wide pools stay undestroyed (the driver reclaims their handles).
#pragma once

#include "evpool/detail/require_cxx20.h"
#include "evpool/export.h"

namespace evpool {

/// Runs the work that pools deferred (see above): returns the events of destroyed graphs to their
/// pools, and finishes pools destroyed while leases were out. Call it from a thread that may call
/// CUDA. Thread-safe; each piece of work runs once. Never throws. Lock-free but for the work,
/// which may call the driver.
EVPOOL_API void run_deferred_work() noexcept;

namespace detail {

/// A piece of deferred work; the object is its own list node.
class DeferredWork {
 public:
  /// Runs once, on a thread that may call the driver; may delete the object.
  virtual void run() noexcept = 0;

 protected:
  DeferredWork() = default;
  DeferredWork(const DeferredWork &) = delete;
  DeferredWork &operator=(const DeferredWork &) = delete;
  ~DeferredWork() = default;

 private:
  friend void defer(DeferredWork &work) noexcept;
  friend void run_deferred_work_pending() noexcept;
  DeferredWork *next_deferred_ = nullptr;
};

/// Hands `work` over to run later. Thread-safe, lock-free, makes no other call: safe on a CUDA
/// thread.
EVPOOL_API void defer(DeferredWork &work) noexcept;

/// Whether work is waiting; a relaxed load, for the callers that run it on their way.
EVPOOL_API bool deferred_work_waiting() noexcept;

}  // namespace detail

}  // namespace evpool
