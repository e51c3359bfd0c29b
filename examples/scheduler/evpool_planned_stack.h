// evpool example scheduler: EvpoolPlannedStack, evpool under a scheduler that knows the graph
// before it runs it.
//
// Design rationale
// ----------------
// The executors that enqueue ahead (DALI's, TensorFlow's) know their graph, and a scheduler on
// evpool that knows it can do more than they do: its streams follow stream_plan.h, so the host
// enqueues a task's successor on the task's own stream as soon as the task is enqueued, and hears
// of a task's completion only where a successor runs on another stream. No task needs an event:
// the stream orders a successor on it, and a completion seen before the enqueue orders one on
// another stream. So a task costs its launch, and where it has a successor on another stream the
// completion queue's record and its poller's share of queries; no wait is ever enqueued on an
// event not yet reached, so none holds up a hardware queue.
// - Streams are leased from a CUDAStreamPool for each planned stream's span
//   (planned_stream_leases.h): the pool hands out only idle streams, so a chain never queues
//   behind another's work, and later runs take the same streams again.
// - Completions come from one CompletionQueue, as in evpool_stack.h; a task none of whose
//   successors needs its completion is complete once enqueued, and finish() synchronises the
//   device once, reporting any error there (enqueued_completions.h).
// The plan is made in the constructor, before any timing, as the limit's streams are.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "cuda_steps.h"
#include "dag.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "planned_stream_leases.h"
#include "stack.h"
#include "stream_plan.h"
#include "task_kernel.h"

namespace evpool::example {

class EvpoolPlannedStack : public CudaSteps {
 public:
  using stream_lease = PlannedStreamLeases<CUDAStreamLease>::Lease;
  /// No task needs an event (see the top): always empty.
  struct event_type {
    explicit operator bool() const noexcept { return false; }
  };

  /// Plans `dag` and starts the queue's poller. `kernel`, `dag` and the pools must outlive the
  /// stack, and the graph must not change. Throws std::bad_alloc, or std::system_error if the
  /// poller cannot start.
  EvpoolPlannedStack(const TaskKernel &kernel, const Dag &dag, CUDAStreamPool &streams = CUDAStreamPool::instance(),
                     CUDAEventPool &events = CUDAEventPool::instance())
      : CudaSteps(kernel),
        plan_(dag),
        leases_(plan_),
        streams_(&streams),
        events_(&events),
        completions_(CUDACompletionBackend(events)) {}

  stream_lease lease_stream(TaskId task) {
    return leases_.lease(task, [this] { return streams_->Get(kDevice); });
  }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept { return plan_.same_stream(task, successor); }
  void wait(const stream_lease &, const event_type &) const noexcept {}
  void launch(const stream_lease &stream, TaskId task, std::chrono::nanoseconds duration) const {
    CudaSteps::launch(stream.get(), task, duration);
  }
  event_type get_event(TaskId) const noexcept { return {}; }
  void record(const event_type &, const stream_lease &) const noexcept {}
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    if (plan_.needed_elsewhere(stream.task()))
      (void)completions_.notify(stream.get(), std::forward<F>(done));  // the callback alone tells
    else
      done(cudaSuccess);
  }
  /// Hands back the streams of a run that skipped tasks, then synchronises the device. Throws
  /// CUDAError with the run's error.
  void finish() {
    leases_.end_all();
    throw_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  /// What the pools created, the queue's events included (as EvpoolStack::created).
  Created created() const { return {streams_->stats().total().created, events_->stats().total().created}; }

 private:
  StreamPlan plan_;
  PlannedStreamLeases<CUDAStreamLease> leases_;
  CUDAStreamPool *streams_;
  CUDAEventPool *events_;
  CompletionQueue completions_;  // last: its destructor waits for every request in progress
};

}  // namespace evpool::example
