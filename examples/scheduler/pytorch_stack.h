// evpool example scheduler: PytorchStack, the executor's plumbing as PyTorch's pieces give it.
//
// Design rationale
// ----------------
// - Streams: PyTorch's pool, 32 streams per device handed out round-robin and shared by whoever
//   gets them (round_robin_streams.h): nothing is exclusive, and a task's work may queue behind
//   any other's that got the same stream.
// - Events: a std::mutex and a vector per device (mutex_event_pool.h), the shape of PyTorch's
//   CUDA event pool.
// - Completions: a waiter thread per stream, each blocking in cudaEventSynchronize on the events
//   of its stream in turn (event_sync_threads.h): what code around PyTorch writes when it must
//   hear of GPU work from the host. 32 threads, each of which spins in the driver while it waits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "competitors/event_sync_threads.h"
#include "competitors/mutex_event_pool.h"
#include "competitors/round_robin_streams.h"
#include "cuda_steps.h"
#include "dag.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_stream_backend.h"
#include "stack.h"
#include "task_kernel.h"

namespace evpool::example {

class PytorchStack : public CudaSteps {
 public:
  static constexpr std::size_t kStreams = 32;

  /// A shared stream and its place, which names its waiter. Nothing to hand back.
  struct stream_lease {
    cudaStream_t stream;
    std::size_t index;
    operator cudaStream_t() const noexcept { return stream; }  // NOLINT: as the other leases
  };
  using event_type = CUDAEvent;

  /// Starts the waiter threads on the caller's current device, which must be kDevice. `kernel`
  /// must outlive the stack. Throws std::system_error if a thread cannot start, CUDAError where
  /// CUDA has no device.
  explicit PytorchStack(const TaskKernel &kernel) : CudaSteps(kernel) {}

  stream_lease lease_stream(TaskId) {
    const auto slot = streams_.GetSlot(kDevice);
    return {slot.stream, slot.index};
  }
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    waiters_.notify(static_cast<int>(stream.index), stream.stream, std::forward<F>(done));
  }
  void finish() {}
  /// The round-robin streams are created at the first lease, all at once.
  Created created() const noexcept { return {kStreams, events_.created() + waiters_.events_created()}; }

 private:
  competitors::RoundRobinStreams<CUDAStreamBackend, kStreams> streams_;
  competitors::MutexEventPool<CUDAEventBackend> events_;
  competitors::EventSyncThreads waiters_{static_cast<int>(kStreams)};  // last: stops first, after its requests
};

}  // namespace evpool::example
