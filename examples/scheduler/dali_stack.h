// evpool example scheduler: DaliStack, the executor's plumbing as DALI builds it.
//
// Design rationale
// ----------------
// DALI's pools, re-implemented in bench/competitors/ and measured there: events and streams each
// in per-device lists behind one yielding spinlock (spinlock_event_pool.h; DALI's stream pool is
// the same design over streams). A stream goes back with its work pending and is handed out again
// at once: the next task's work queues behind it. Completions come through cudaLaunchHostFunc
// (host_func_completions.h), CUDA's own answer: a host function behind the work, run on the
// driver's thread, which holds up the stream while it runs and may make no CUDA call (the
// executor's callback makes none). A host function hears no error: it reports cudaSuccess, and
// after a sticky error CUDA may never run it at all, so a run on this stack then waits for ever,
// where the evpool stack's queue reports the error to the task.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "competitors/host_func_completions.h"
#include "competitors/spinlock_event_pool.h"
#include "cuda_steps.h"
#include "dag.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_stream_backend.h"
#include "owned_stream_lease.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class DaliStack : public CudaSteps {
  using Streams = competitors::SpinlockEventPool<CUDAStreamBackend>;
  using Events = competitors::SpinlockEventPool<CUDAEventBackend>;

 public:
  using stream_lease = OwnedStreamLease<Streams>;
  using event_type = CUDAEvent;

  /// `kernel` must outlive the stack. Throws CUDAError where CUDA has no device.
  explicit DaliStack(const TaskKernel &kernel) : CudaSteps(kernel) {}

  stream_lease lease_stream(TaskId) { return stream_lease(streams_, streams_.Get(kDevice)); }
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    completions_.notify(stream, std::forward<F>(done));
  }
  void finish() {}
  Created created() const noexcept { return {streams_.created(), events_.created()}; }

 private:
  Streams streams_;
  Events events_;
  competitors::HostFuncCompletions completions_;
};

}  // namespace evpool::example
