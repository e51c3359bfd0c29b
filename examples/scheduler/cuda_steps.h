// evpool example scheduler: CudaSteps, what every CUDA stack enqueues the same way.
//
// Design rationale
// ----------------
// The nine CUDA stacks differ in where streams, events and completions come from; the three
// steps a task enqueues with them are the same CUDA calls everywhere: cudaStreamWaitEvent for an
// input, the task's kernel (task_kernel.h), cudaEventRecord for its own event. So they are here
// once, on raw handles (each stack's leases and events convert to them), with what a CUDA status
// means to the executor. A failed call throws CUDAError naming it; the executor then fails the
// task (executor.h).
//
// Every stack works on one device, device 0, the current device of a thread that never chose one:
// the executor's workers launch there. Spreading a graph over devices is not this example's
// subject.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <utility>

#include "dag.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "task_kernel.h"

namespace evpool::example {

class CudaSteps {
 public:
  using status_type = cudaError_t;
  static constexpr int kDevice = 0;

  static bool succeeded(cudaError_t status) noexcept { return status == cudaSuccess; }
  static std::string describe(cudaError_t status) { return cudaGetErrorName(status); }

  /// `kernel` must outlive the stack.
  explicit CudaSteps(const TaskKernel &kernel) noexcept : kernel_(&kernel) {}

  static void wait(cudaStream_t stream, cudaEvent_t event) {
    throw_on(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
  }
  void launch(cudaStream_t stream, TaskId task, std::chrono::nanoseconds duration) const {
    throw_on(kernel_->launch(stream, task, duration), "cudaLaunchKernel");
  }
  static void record(cudaEvent_t event, cudaStream_t stream) {
    throw_on(cudaEventRecord(event, stream), "cudaEventRecord");
  }

 protected:
  static void throw_on(cudaError_t error, const char *call) {
    if (error != cudaSuccess) throw CUDAError(error, call);
  }
  /// Hands `handle` (a CUDAEvent or CUDAStream) back to `pool` under kDevice, never throwing: a
  /// pool that refuses it (out of memory) leaves it in `handle`, which destroys it.
  template <class Pool, class Handle>
  static void put_or_destroy(Pool &pool, Handle &&handle) noexcept {
    try {
      pool.Put(std::move(handle), kDevice);
    } catch (...) {
    }
  }

 private:
  const TaskKernel *kernel_;
};

}  // namespace evpool::example
