// evpool example scheduler: LimitStack, the host-scheduled ceiling: no pool, no completions.
//
// Design rationale
// ----------------
// What a scheduler could do if it knew the whole graph before running it: every stream and event
// is created in the constructor, before any timing; each task's stream and event are fixed in
// advance; the callback runs at once, as soon as the task is enqueued, so the graph moves at the
// speed the host enqueues, and the waits alone order the GPU (executor.h says why that is
// correct); finish() synchronises the device once, at the end, and reports any error there.
//
// Task t runs on the stream of its slot, its place among the tasks of its level (dag.h): with as
// many streams as the graph's width, the tasks that may run at once never share a stream, so no
// task waits behind another it does not need. Each task that some other task needs has an event
// of its own, never reused: no event goes back anywhere.
//
// Its "latency" (from ready to the callback) is only the enqueueing: the benchmark reports it for
// the other stacks.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda_steps.h"
#include "dag.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_stream.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class LimitStack : public CudaSteps {
 public:
  using stream_lease = cudaStream_t;
  using event_type = cudaEvent_t;

  /// Creates `streams` streams (0: the graph's width) and an event for every task with
  /// successors, on kDevice. `kernel` and `dag` must outlive the stack, and the graph must not
  /// change. Throws CUDAError; what was created is destroyed.
  LimitStack(const TaskKernel &kernel, const Dag &dag, std::size_t streams = 0)
      : CudaSteps(kernel), dag_(&dag) {
    streams_.resize(streams == 0 ? std::max<std::size_t>(1, dag.width()) : streams);
    for (CUDAStream &stream : streams_) stream = CUDAStream::Create(/*non_blocking=*/true, kDevice);
    events_.resize(dag.size());
    for (TaskId task = 0; task < dag.size(); ++task)
      if (!dag.successors(task).empty()) events_[task] = CUDAEvent::Create(kDevice);
  }

  stream_lease lease_stream(TaskId task) { return streams_[dag_->slot(task) % streams_.size()]; }
  event_type get_event(TaskId task) { return events_[task]; }
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(stream_lease, F &&done) {
    done(cudaSuccess);
  }
  /// The one synchronisation, for all the work of the run.
  void finish() { throw_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  Created created() const noexcept {
    Created made{streams_.size(), 0};
    for (const CUDAEvent &event : events_) made.events += static_cast<bool>(event);
    return made;
  }

 private:
  const Dag *dag_;
  std::vector<CUDAStream> streams_;
  std::vector<CUDAEvent> events_;  // by task; empty for a task that no task needs
};

}  // namespace evpool::example
