// evpool example scheduler: TensorflowExecStack, the executor's plumbing as TensorFlow's own
// executor assigns it.
//
// Design rationale
// ----------------
// TensorFlow runs every GPU kernel of a device on one compute stream: BaseGPUDevice
// (tensorflow/core/common_runtime/gpu/gpu_device.cc) makes one stream group per GPU and a single
// device context on its compute stream, which every op's Compute() uses ("since there is only one
// stream", it records no accessed tensors). A kernel op is done when Compute() returns, its work
// enqueued, and its successors are scheduled then (enqueued_completions.h); the one stream orders
// the GPU, so no event is recorded or waited on. EventMgr (tensorflow_stack.h) serves what must
// hear of the GPU's progress: freeing memory, copies to the host, asynchronous ops, none of them
// in this graph.
//
// TF_GPU_THREAD_MODE only chooses the host threads that launch; it leaves the stream alone.
#pragma once

#include <cuda_runtime_api.h>

#include "dag.h"
#include "enqueued_completions.h"
#include "evpool/cuda_stream.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class TensorflowExecStack : public EnqueuedCompletions {
 public:
  using stream_lease = cudaStream_t;
  /// No event is ever made: the one stream orders everything.
  struct event_type {
    explicit operator bool() const noexcept { return false; }
  };

  /// Creates the compute stream on kDevice. `kernel` must outlive the stack. Throws CUDAError.
  explicit TensorflowExecStack(const TaskKernel &kernel)
      : EnqueuedCompletions(kernel), compute_(CUDAStream::Create(/*non_blocking=*/true, kDevice)) {}

  stream_lease lease_stream(TaskId) const noexcept { return compute_; }
  void wait(stream_lease, const event_type &) const noexcept {}
  event_type get_event(TaskId) const noexcept { return {}; }
  void record(const event_type &, stream_lease) const noexcept {}
  void put_event(event_type &&) noexcept {}
  Created created() const noexcept { return {1, 0}; }

 private:
  CUDAStream compute_;
};

}  // namespace evpool::example
