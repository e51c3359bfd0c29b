// evpool example scheduler: DaliExecStack, the executor's plumbing as DALI's own executor
// assigns it.
//
// Design rationale
// ----------------
// DALI's executor (dali/pipeline/executor/executor2/exec2.cc, stream_assignment.h) does not lease
// a stream per operator: it takes its streams from DALI's CUDAStreamPool once, when the pipeline
// is built, and gives each operator one by a stream policy. The default, StreamPolicy::PerBackend,
// puts every GPU operator on one stream (mixed operators on another; this graph has none); so
// does Single. Here: one stream from DALI's pool (spinlock_event_pool.h over streams) for the
// stack's life.
//
// What DALI takes per operator and how it hears of work, as exec_node_task.cc has them: each
// operator's workspace has an event from DALI's CUDAEventPool, recorded after the operator's work
// (an event per task here, from the spinlock pool, handed back once its successors waited);
// a consumer waits with cudaStreamWaitEvent only on inputs of another stream (none here: one
// stream orders everything); and a task is complete once its work is enqueued
// (enqueued_completions.h).
//
// StreamPolicy::PerOperator, which a user may choose instead, hands stream ids down the graph's
// edges (the first consumer inherits its producer's stream, a branch takes the lowest free id): a
// static assignment enqueued ahead, as the limit's (chain_streams.h), made with DALI's pools; not
// measured here (docs/scheduler.md).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "competitors/spinlock_event_pool.h"
#include "dag.h"
#include "enqueued_completions.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_stream.h"
#include "evpool/cuda_stream_backend.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class DaliExecStack : public EnqueuedCompletions {
  using Streams = competitors::SpinlockEventPool<CUDAStreamBackend>;
  using Events = competitors::SpinlockEventPool<CUDAEventBackend>;

 public:
  using stream_lease = cudaStream_t;
  using event_type = CUDAEvent;

  /// Takes the stack's one stream from its pool. `kernel` must outlive the stack. Throws
  /// CUDAError where CUDA has no device.
  explicit DaliExecStack(const TaskKernel &kernel)
      : EnqueuedCompletions(kernel), stream_(streams_.Get(kDevice)) {}
  DaliExecStack(const DaliExecStack &) = delete;
  DaliExecStack &operator=(const DaliExecStack &) = delete;
  ~DaliExecStack() { put_or_destroy(streams_, std::move(stream_)); }

  stream_lease lease_stream(TaskId) const noexcept { return stream_; }
  /// Every input ran on the one stream, which orders it already.
  void wait(stream_lease, const event_type &) const noexcept {}
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  Created created() const noexcept { return {streams_.created(), events_.created()}; }

 private:
  Streams streams_;
  Events events_;
  CUDAStream stream_;
};

}  // namespace evpool::example
