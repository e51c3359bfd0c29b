// evpool example scheduler: TensorflowStack, TensorFlow's pieces under an executor that leases a
// stream per task.
//
// Design rationale
// ----------------
// - Streams and events: a std::mutex and a vector per device each (mutex_event_pool.h, over
//   streams and over events), for want of a TensorFlow pool of streams: TensorFlow's own executor
//   runs every kernel on one compute stream (tensorflow_exec_stack.h). A stream goes back with its
//   work pending and is handed out again at once, as from DALI's pool.
// - Completions: TensorFlow's EventMgr (fifo_event_poller.h, after
//   tensorflow/core/common_runtime/device/device_event_mgr.cc and the gpu_event_mgr.cc before it):
//   one FIFO of recorded events under one mutex, swept whole by a polling thread that sleeps
//   polling_active_delay_usecs (10 us) between sweeps, with the same 1 us timer slack as evpool's
//   poller, and a second thread that runs the callbacks. Its callbacks take no status: an event in
//   error aborts the process, as TensorFlow's does, so the executor only ever hears of success.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "competitors/fifo_event_poller.h"
#include "competitors/mutex_event_pool.h"
#include "cuda_steps.h"
#include "dag.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_stream_backend.h"
#include "owned_stream_lease.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class TensorflowStack : public CudaSteps {
  using Streams = competitors::MutexEventPool<CUDAStreamBackend>;
  using Events = competitors::MutexEventPool<CUDAEventBackend>;

 public:
  using stream_lease = OwnedStreamLease<Streams>;
  using event_type = CUDAEvent;

  /// Starts the poller's two threads on the caller's current device, which must be kDevice.
  /// `kernel` must outlive the stack. Throws std::system_error if a thread cannot start,
  /// CUDAError where CUDA has no device.
  explicit TensorflowStack(const TaskKernel &kernel) : CudaSteps(kernel) {}

  stream_lease lease_stream(TaskId) { return stream_lease(streams_, streams_.Get(kDevice)); }
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    poller_.ThenExecute(stream, [done = std::forward<F>(done)]() mutable { done(cudaSuccess); });
  }
  void finish() {}
  Created created() const noexcept {
    return {streams_.created(), events_.created() + poller_.events_created()};
  }

 private:
  Streams streams_;
  Events events_;
  competitors::FifoEventPoller poller_;  // last: stops first, after its requests
};

}  // namespace evpool::example
