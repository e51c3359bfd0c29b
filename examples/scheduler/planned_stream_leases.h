// evpool example scheduler: PlannedStreamLeases, a stream leased from a pool for the span of a
// stream of a StreamPlan, from its first task's enqueue to its last task's.
//
// Design rationale
// ----------------
// A stack that plans its streams (stream_plan.h) needs each planned stream only while its chain
// of tasks is being enqueued. Leasing a pool's stream for that span, rather than creating every
// stream beforehand as the limit does, keeps what the stack holds to the chains in progress, and
// a later run (or another user of the pool) takes the same streams again once their work is done.
//
// No lock: the tasks of one planned stream are enqueued one after another (each after the one
// before it on the stream, stream_plan.h says why), and the executor's hand-over from one task to
// the next (its counts' acq_rel and the ready queue's mutex) orders each task's use of the slot
// after the last. So the first task's lease_stream fills the slot, the tasks after it read it, and
// the Lease of the stream's last task empties it when it ends, which is after every earlier task
// has enqueued (a Lease of an earlier task may still exist then: it only holds a copy of the
// handle). A run that fails skips tasks, so a slot may still be full at the end: end_all(), once
// the run is over, hands those back.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "dag.h"
#include "stream_plan.h"

namespace evpool::example {

/// `PoolLease`: a pool's exclusive stream lease (evpool's UniqueLease, CUDAStreamLease): default
/// constructible empty, movable, get() the handle, reset() hands it back.
template <class PoolLease>
class PlannedStreamLeases {
 public:
  using handle_type = decltype(std::declval<const PoolLease &>().get());

  /// What the executor holds for one task: the task's stream. Ends the planned stream's lease if
  /// the task is the stream's last.
  class Lease {
   public:
    Lease(const Lease &) = delete;
    Lease &operator=(const Lease &) = delete;
    ~Lease() {
      if (owner_->plan_->last_on(stream_) == task_) owner_->slots_[stream_].reset();
    }

    handle_type get() const noexcept { return handle_; }
    TaskId task() const noexcept { return task_; }

   private:
    friend PlannedStreamLeases;
    Lease(PlannedStreamLeases &owner, TaskId task, std::uint32_t stream, handle_type handle) noexcept
        : owner_(&owner), task_(task), stream_(stream), handle_(handle) {}

    PlannedStreamLeases *owner_;
    TaskId task_;
    std::uint32_t stream_;
    handle_type handle_;
  };

  /// `plan` must outlive the leases.
  explicit PlannedStreamLeases(const StreamPlan &plan) : plan_(&plan), slots_(plan.streams()) {}

  /// The task's planned stream; its first task takes it with `get_from_pool()`, which returns a
  /// PoolLease. Throws what get_from_pool throws, with nothing taken. Callers: the executor's
  /// workers, one task after another for each planned stream (see the top).
  template <class GetFromPool>
  Lease lease(TaskId task, GetFromPool &&get_from_pool) {
    const std::uint32_t stream = plan_->stream_of(task);
    PoolLease &slot = slots_[stream];
    if (!slot) slot = get_from_pool();
    return Lease(*this, task, stream, slot.get());
  }

  /// Hands back every stream still leased (those of a run that skipped tasks). Once the run is
  /// over: no Lease may exist.
  void end_all() noexcept {
    for (PoolLease &slot : slots_) slot.reset();
  }

 private:
  const StreamPlan *plan_;
  std::vector<PoolLease> slots_;  // by planned stream
};

}  // namespace evpool::example
