// evpool example scheduler: LimitStack, the graph run by a host that knows it in advance.
//
// Design rationale
// ----------------
// What a scheduler could do if it knew the whole graph before running it: every stream and event
// is created in the constructor, before any timing; each task's stream and event are fixed in
// advance; the callback runs at once, as soon as the task is enqueued, so the graph moves at the
// speed the host enqueues, and the waits alone order the GPU (executor.h says why that is
// correct); finish() synchronises the device once, at the end, and reports any error there.
//
// Task t runs on the stream chain_streams.h gives it: each stream a chain of the graph, so no
// task waits on the GPU behind a task it does not need, and the GPU's part takes the graph's
// critical path. A wait on an input that ran on the task's own stream is skipped: the stream
// orders the two already. Each task that some task on another stream needs (stream_plan.h) has an
// event of its own, never reused: no event goes back anywhere; a task needed only on its own
// stream records none.
//
// Its "latency" (from ready to the callback) is only the enqueueing: the benchmark reports it for
// the other stacks.
//
// A ceiling where the GPU runs every stream side by side (test/support/gpu_time.h's model), and
// on a real GPU where the work is the host's launches. Where GPU work dominates it is not one:
// enqueuing the whole graph ahead on more streams than the GPU has hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS) lets a wait at the head of a queue hold up unrelated work behind
// it, and evpool's stack, which enqueues only ready tasks, passed it on the mixed workload
// (docs/scheduler.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "stream_plan.h"
#include "cuda_steps.h"
#include "dag.h"
#include "enqueued_completions.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_stream.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class LimitStack : public EnqueuedCompletions {
 public:
  using stream_lease = cudaStream_t;
  /// A task's event and the stream it is recorded on; empty (false) when no event.
  struct event_type {
    cudaEvent_t event = nullptr;
    cudaStream_t stream = nullptr;
    explicit operator bool() const noexcept { return event != nullptr; }
  };

  /// Creates the streams of chain_streams(dag) and an event for every task needed on another
  /// stream, on kDevice. `kernel` and `dag` must outlive the stack, and the graph must not change. Throws
  /// CUDAError; what was created is destroyed.
  LimitStack(const TaskKernel &kernel, const Dag &dag) : EnqueuedCompletions(kernel), plan_(dag) {
    streams_.resize(plan_.streams());
    for (CUDAStream &stream : streams_) stream = CUDAStream::Create(/*non_blocking=*/true, kDevice);
    events_.resize(dag.size());
    for (TaskId task = 0; task < dag.size(); ++task)
      if (plan_.needed_elsewhere(task)) events_[task] = CUDAEvent::Create(kDevice);
  }

  stream_lease lease_stream(TaskId task) { return streams_[plan_.stream_of(task)]; }
  void wait(stream_lease stream, const event_type &input) {
    if (input.stream != stream) CudaSteps::wait(stream, input.event);
  }
  event_type get_event(TaskId task) { return {events_[task], streams_[plan_.stream_of(task)]}; }
  void record(const event_type &event, stream_lease stream) {
    if (event) CudaSteps::record(event.event, stream);
  }
  void put_event(event_type &&) noexcept {}

  Created created() const noexcept {
    Created made{streams_.size(), 0};
    for (const CUDAEvent &event : events_) made.events += static_cast<bool>(event);
    return made;
  }

 private:
  StreamPlan plan_;
  std::vector<CUDAStream> streams_;
  std::vector<CUDAEvent> events_;  // by task; empty for a task needed only on its own stream
};

}  // namespace evpool::example
