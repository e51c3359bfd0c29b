// evpool example scheduler: EvpoolStack, the executor's plumbing on evpool.
//
// Design rationale
// ----------------
// - Streams are leased from a CUDAStreamPool: exclusively while the task enqueues, then handed
//   back with the work pending. The pool does not hand a stream out again until its work is done
//   (StreamReuse::kWhenIdle), so no task's work queues behind an earlier task's, and a pool that
//   finds all its streams busy creates another: the pool grows to the graph's parallelism.
// - Events come from a CUDAEventPool, and go back once every successor's wait is enqueued.
// - Completions come from one CompletionQueue, whose poller thread queries only the oldest
//   request of each stream and runs the callbacks; it records its own events, from the same pool.
// The pools are the caller's, the process-wide ones unless told otherwise, as a scheduler would
// use them; their stats() tell what a run created and whether everything came back. The queue is
// the stack's: its destructor waits for every request in progress.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <utility>

#include "cuda_steps.h"
#include "dag.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class EvpoolStack : public CudaSteps {
 public:
  using stream_lease = CUDAStreamLease;
  using event_type = CUDAEvent;

  /// Starts the queue's poller. `kernel` and the pools must outlive the stack. Throws
  /// std::system_error if the poller cannot start.
  explicit EvpoolStack(const TaskKernel &kernel, CUDAStreamPool &streams = CUDAStreamPool::instance(),
                       CUDAEventPool &events = CUDAEventPool::instance())
      : CudaSteps(kernel), streams_(&streams), events_(&events), completions_(CUDACompletionBackend(events)) {}

  stream_lease lease_stream(TaskId) { return streams_->Get(kDevice); }
  event_type get_event(TaskId) { return events_->Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(*events_, std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    (void)completions_.notify(stream, std::forward<F>(done));  // the callback alone tells
  }
  void finish() {}
  /// What the pools created, the queue's events included: the pools' figures, whoever else uses
  /// them.
  Created created() const { return {streams_->stats().total().created, events_->stats().total().created}; }

 private:
  CUDAStreamPool *streams_;
  CUDAEventPool *events_;
  CompletionQueue completions_;
};

}  // namespace evpool::example
