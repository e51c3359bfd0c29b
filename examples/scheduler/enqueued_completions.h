// evpool example scheduler: EnqueuedCompletions, for stacks whose executor counts a task complete
// once its work is enqueued.
//
// Design rationale
// ----------------
// Executors that own the whole graph need not hear of each task's GPU work: the waits on the
// inputs' events order the GPU by themselves (executor.h says why the executor stays correct),
// so a task's successors may be enqueued as soon as the task is. DALI's executor does this (a
// task is complete when its host part is, dali/core/exec/tasking/scheduler.h; consumers wait on
// the producer's event with cudaStreamWaitEvent, and the host synchronises only on the outputs'
// events), TensorFlow's does it for GPU kernels on its one compute stream (an op is done when its
// Compute() returns), and the limit does it. The run is over once the device is idle: finish()
// synchronises it, and reports any error of the run's work there. Such a stack's "latency" from
// ready to completion is only the enqueueing; the benchmark does not report it.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda_steps.h"
#include "task_kernel.h"

namespace evpool::example {

class EnqueuedCompletions : public CudaSteps {
 public:
  using CudaSteps::CudaSteps;

  /// Calls done(cudaSuccess) at once: the task is complete once enqueued (see the top).
  template <class Stream, class F>
  void notify(const Stream &, F &&done) {
    done(cudaSuccess);
  }
  /// The one synchronisation, for all the work of the run. Throws CUDAError with its error.
  void finish() { throw_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
};

}  // namespace evpool::example
