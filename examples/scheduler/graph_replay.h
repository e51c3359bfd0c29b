// evpool example scheduler: GraphReplay, the graph captured once as a CUDA graph and replayed: the
// reference for what scheduling from the host costs at all.
//
// Design rationale
// ----------------
// No executor, no worker, no stack: the whole graph is enqueued once, in id order (a topological
// order, dag.h), by one thread, under stream capture, exactly as the limit stack would enqueue it
// (limit_stack.h: the stream of each task's slot, an event per task that another task needs, a
// wait per input), and the captured CUDA graph is instantiated once. A replay is one
// cudaGraphLaunch and one synchronisation: the GPU alone orders the work, from the edges the
// waits became. What a host-scheduled run takes beyond a replay is what scheduling from the host
// costs.
//
// The capture forks every stream from the origin stream (each waits on an event recorded there)
// and joins them back (the origin waits on an event recorded on each), as a capture across streams
// must; it uses thread-local capture mode, so other threads' CUDA calls meanwhile are unaffected.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "cuda_steps.h"
#include "dag.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_stream.h"
#include "task_kernel.h"

namespace evpool::example {

class GraphReplay : CudaSteps {
 public:
  /// Captures `dag` on `streams` streams (0: the graph's width) and instantiates it, on kDevice.
  /// `kernel` must outlive the replay. Throws CUDAError; what was made is destroyed, and no
  /// capture is left open.
  GraphReplay(const TaskKernel &kernel, const Dag &dag, std::size_t streams = 0) : CudaSteps(kernel) {
    origin_ = CUDAStream::Create(/*non_blocking=*/true, kDevice);
    streams_.resize(streams == 0 ? std::max<std::size_t>(1, dag.width()) : streams);
    for (CUDAStream &stream : streams_) stream = CUDAStream::Create(/*non_blocking=*/true, kDevice);
    std::vector<CUDAEvent> events(dag.size() + 1 + streams_.size());  // tasks', the fork's, the joins'
    for (CUDAEvent &event : events) event = CUDAEvent::Create(kDevice);
    const cudaEvent_t fork = events[dag.size()];

    throw_on(cudaStreamBeginCapture(origin_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      record(fork, origin_);
      for (const CUDAStream &stream : streams_) wait(stream, fork);
      for (TaskId task = 0; task < dag.size(); ++task) {
        const cudaStream_t stream = streams_[dag.slot(task) % streams_.size()];
        for (const TaskId input : dag.inputs(task)) wait(stream, events[input]);
        launch(stream, task, dag.duration(task));
        if (!dag.successors(task).empty()) record(events[task], stream);
      }
      for (std::size_t i = 0; i < streams_.size(); ++i) {
        record(events[dag.size() + 1 + i], streams_[i]);
        wait(origin_, events[dag.size() + 1 + i]);
      }
    } catch (...) {
      (void)cudaStreamEndCapture(origin_, &graph);  // invalidated or not, the capture ends
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      throw;
    }
    throw_on(cudaStreamEndCapture(origin_, &graph), "cudaStreamEndCapture");
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    (void)cudaGraphDestroy(graph);  // the instance keeps what it needs
    throw_on(instantiated, "cudaGraphInstantiate");
  }
  GraphReplay(const GraphReplay &) = delete;
  GraphReplay &operator=(const GraphReplay &) = delete;
  ~GraphReplay() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  }

  /// Runs the whole graph once and waits for it. Throws CUDAError. Not thread-safe.
  void replay() {
    throw_on(cudaGraphLaunch(exec_, origin_), "cudaGraphLaunch");
    throw_on(cudaStreamSynchronize(origin_), "cudaStreamSynchronize");
  }

 private:
  CUDAStream origin_;
  std::vector<CUDAStream> streams_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace evpool::example
