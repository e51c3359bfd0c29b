// evpool example scheduler: PytorchStack, the executor's plumbing as PyTorch's pieces give it.
//
// Design rationale
// ----------------
// What a scheduler built from PyTorch's pieces gets, each re-implemented in bench/competitors/
// after PyTorch's source:
// - Streams: c10/cuda/CUDAStream.cpp's pool, 32 streams per device and priority
//   (kStreamsPerPool), created together at the first request and handed out round-robin
//   (get_idx: counter++ % 32), shared by whoever gets them (round_robin_streams.h): nothing is
//   exclusive, and a task's work may queue behind any other's that got the same stream.
// - Events: a std::mutex and a vector per device (mutex_event_pool.h), the shape of the event
//   pools in c10/cuda/CUDACachingAllocator.cpp (EventPool) and the pinned host allocator.
// - Completions: PyTorch has no callback mechanism; code around it hears of GPU work through
//   torch.cuda.Event's query() (cudaEventQuery) or synchronize() (cudaEventSynchronize). This
//   stack takes synchronize() from a pool of waiter threads sized to the host's cores
//   (event_sync_threads.h): stream i's events go to waiter i % cores, which synchronises on them
//   in the order they came. Each waiter spins in the driver while it waits (the events have
//   PyTorch's default flags, cudaEventDisableTiming), so with work in flight the waiters hold
//   cores that the workers need too; more waiters than cores would only compete more, fewer would
//   queue more completions behind one another. query() from the workers themselves needs an
//   executor that polls between tasks, which this one (executor.h) does not.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <thread>
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

  /// Starts a waiter thread per core (at least one) on the caller's current device, which must be
  /// kDevice. `kernel` must outlive the stack. Throws std::system_error if a thread cannot start,
  /// CUDAError where CUDA has no device.
  explicit PytorchStack(const TaskKernel &kernel) : CudaSteps(kernel) {}

  stream_lease lease_stream(TaskId) {
    const auto slot = streams_.GetSlot(kDevice);
    return {slot.stream, slot.index};
  }
  event_type get_event(TaskId) { return events_.Get(kDevice); }
  void put_event(event_type &&event) noexcept { put_or_destroy(events_, std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    waiters_.notify(static_cast<int>(stream.index % waiter_count_), stream.stream, std::forward<F>(done));
  }
  void finish() {}
  /// The round-robin streams are created at the first lease, all at once.
  Created created() const noexcept { return {kStreams, events_.created() + waiters_.events_created()}; }

 private:
  competitors::RoundRobinStreams<CUDAStreamBackend, kStreams> streams_;
  competitors::MutexEventPool<CUDAEventBackend> events_;
  const std::size_t waiter_count_ = std::max(1u, std::thread::hardware_concurrency());
  competitors::EventSyncThreads waiters_{static_cast<int>(waiter_count_)};  // last: stops first, after its requests
};

}  // namespace evpool::example
