// evpool example scheduler: DaliStack, DALI's pools under an executor that leases a stream per
// task.
//
// Design rationale
// ----------------
// DALI's pools, re-implemented in bench/competitors/ and measured there: events and streams each
// in per-device lists behind one yielding spinlock (spinlock_event_pool.h, after DALI's
// dali/core/cuda_event_pool.cc; its dali/core/cuda_stream_pool.cc is the same design over
// streams). A stream goes back with its work pending and is handed out again at once: the next
// task's work queues behind it. This is what a scheduler that leases a stream per task gets from
// DALI's pools; DALI's own executor leases its streams once and assigns them to operators
// (dali_exec_stack.h).
//
// Completions as DALI's executor has them (enqueued_completions.h): a task is complete once its
// work is enqueued, and the waits order the GPU. So with one worker every task lands on the
// stream the last one handed back, and the GPU runs the graph in one line.
#pragma once

#include <utility>

#include "competitors/spinlock_event_pool.h"
#include "dag.h"
#include "enqueued_completions.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_stream_backend.h"
#include "owned_stream_lease.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class DaliStack : public EnqueuedCompletions {
  using Streams = competitors::SpinlockEventPool<CUDAStreamBackend>;
  using Events = competitors::SpinlockEventPool<CUDAEventBackend>;

 public:
  using stream_lease = OwnedStreamLease<Streams>;
  using event_type = CUDAEvent;

  /// `kernel` must outlive the stack.
  explicit DaliStack(const TaskKernel &kernel) : EnqueuedCompletions(kernel) {}

  stream_lease lease_stream(TaskId) { return stream_lease(streams_, streams_.Get(kDevice)); }
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  Created created() const noexcept { return {streams_.created(), events_.created()}; }

 private:
  Streams streams_;
  Events events_;
};

}  // namespace evpool::example
