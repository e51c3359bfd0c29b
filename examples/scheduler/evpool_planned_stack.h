// evpool example scheduler: EvpoolPlannedStack and EvpoolAheadStack, evpool under a scheduler that
// knows the graph before it runs it.
//
// Design rationale
// ----------------
// The executors that enqueue ahead (DALI's, TensorFlow's) know their graph, and so can a scheduler
// on evpool. Its streams follow stream_plan.h, so a task's successor on the task's own stream is
// ordered by the stream: the host enqueues it as soon as the task is enqueued (the executor's
// follows_at_enqueue), with no event and no wait. A successor on another stream must be ordered
// some other way, and the two stacks differ only there (CrossStreamOrder):
// - kCompletions (`evpool-planned`): the successor is enqueued once the host has heard of the
//   task's completion: anything enqueued after that runs after it, so it needs no event and no
//   wait either. Only a task with a successor on another stream asks for a completion; the others
//   are complete once enqueued. No wait is ever enqueued on work not yet done, so none holds up a
//   hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) with unrelated work behind it, at the price of a
//   completion's latency on every edge between streams.
// - kEvents (`evpool-ahead`): the task records an event from a CUDAEventPool and the successor
//   waits on it, so every task is complete once enqueued and the whole graph is enqueued ahead, as
//   the limit does, with the limit's hold-ups on the hardware queues; the event goes back once the
//   last successor's wait is enqueued.
// Either way, streams are leased from a CUDAStreamPool for each planned stream's span
// (planned_stream_leases.h): the pool hands out only idle streams, so a chain never queues behind
// another's work, and later runs take the same streams again; a task that is complete once
// enqueued is covered by finish(), which synchronises the device once and reports any error
// there (enqueued_completions.h). The plan is made in the constructor, before any timing, as the
// limit's streams are.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

#include "cuda_steps.h"
#include "dag.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "planned_stream_leases.h"
#include "stack.h"
#include "stream_plan.h"
#include "task_kernel.h"

namespace evpool::example {

template <CrossStreamOrder kOrder>
class BasicEvpoolPlannedStack : public CudaSteps {
 public:
  using stream_lease = typename PlannedStreamLeases<CUDAStreamLease>::Lease;
  /// A task's event and the planned stream it is recorded on (a plan's index, not the handle: a
  /// pool stream handed back at the end of its chain may be destroyed, and CUDA gives its handle to
  /// the next stream created); empty (false) for a task needed only on its own stream, and always
  /// with kCompletions.
  struct event_type {
    CUDAEvent event;
    std::uint32_t planned_stream = 0;
    explicit operator bool() const noexcept { return static_cast<bool>(event); }
  };

  /// Plans `dag` and, with kCompletions, starts the queue's poller. `kernel`, `dag` and the pools
  /// must outlive the stack, and the graph must not change. Throws std::bad_alloc, or
  /// std::system_error if the poller cannot start.
  BasicEvpoolPlannedStack(const TaskKernel &kernel, const Dag &dag,
                          CUDAStreamPool &streams = CUDAStreamPool::instance(),
                          CUDAEventPool &events = CUDAEventPool::instance())
      : CudaSteps(kernel), plan_(dag), leases_(plan_), streams_(&streams), events_(&events) {
    if (kOrder == CrossStreamOrder::kCompletions) completions_.emplace(CUDACompletionBackend(events));
  }

  stream_lease lease_stream(TaskId task) {
    return leases_.lease(task, [this] { return streams_->Get(kDevice); });
  }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept {
    return plan_.same_stream(task, successor);
  }
  /// Only an input on another stream (kEvents): the stream orders one on the task's own.
  void wait(const stream_lease &stream, const event_type &input) const {
    if (input.planned_stream != plan_.stream_of(stream.task())) CudaSteps::wait(stream.get(), input.event);
  }
  void launch(const stream_lease &stream, TaskId task, std::chrono::nanoseconds duration) const {
    CudaSteps::launch(stream.get(), task, duration);
  }
  event_type get_event(TaskId task) {
    if (kOrder == CrossStreamOrder::kCompletions || !plan_.needed_elsewhere(task)) return {};
    return {events_->Get(kDevice), plan_.stream_of(task)};
  }
  void record(const event_type &event, const stream_lease &stream) const {
    if (event) CudaSteps::record(event.event, stream.get());
  }
  void put_event(event_type &&event) noexcept { put_or_destroy(*events_, std::move(event.event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    if (kOrder == CrossStreamOrder::kCompletions && plan_.needed_elsewhere(stream.task()))
      (void)completions_->notify(stream.get(), std::forward<F>(done));  // the callback alone tells
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
  std::optional<CompletionQueue> completions_;  // kCompletions only; last: its destructor waits for every request
};

using EvpoolPlannedStack = BasicEvpoolPlannedStack<CrossStreamOrder::kCompletions>;
using EvpoolAheadStack = BasicEvpoolPlannedStack<CrossStreamOrder::kEvents>;

}  // namespace evpool::example
