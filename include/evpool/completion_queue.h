// evpool: CompletionQueue, completions of work on CUDA streams, heard through pooled events.
//
// Design rationale
// ----------------
// CompletionQueue is BasicCompletionQueue (basic_completion_queue.h, where the design is) over
// CUDACompletionBackend, which records an event from a CUDAEventPool (CUDAEventPool::instance()
// unless told otherwise: events without timing, the cheapest to record and query) on the
// request's stream, on the stream's device, and queries it with cuEventQuery (through the
// runtime's entry-point lookup: no link to libcuda). A query takes driver locks, which is why
// a single poller queries, and only the oldest request of each stream. Each record also reads the
// stream's id (cuStreamGetId, one driver call of about a cuStreamGetDevice's cost; the runtime's
// cudaStreamGetId for the special handles), which names the stream for the process's life where
// its handle does not (completion_backend.h).
//
// Completion signals (opt-in, CompletionSignal::kAuto; the default is kEventQuery): the backend
// also enqueues, before the event, a cuStreamWriteValue64 of the request's number into a word of
// pinned, portable, mapped host memory (allocate_signal_words, cudaHostAlloc), which the poller
// reads instead of querying the event (basic_completion_queue.h, detail/signal_slots.h). Where the driver lacks the entry
// point, a device reports no CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (the attribute
// of CUDA 12 and 13; the _V1 attributes belong to the deprecated v1 API), the memory cannot be
// allocated or mapped at its host address, or the stream is one of the special handles (0,
// cudaStreamLegacy, cudaStreamPerThread), the request is heard through its event as before.
//
// Why not cudaLaunchHostFunc: its callback runs on a driver thread, may make no CUDA call, and
// holds up the stream while it runs; each costs a host-function node in the stream (docs/
// completions.md has the measurements).
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "evpool/basic_completion_queue.h"
#include "evpool/completion.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/export.h"

namespace evpool {

/// Thread-safe: every member may be called from any number of threads.
class EVPOOL_API CUDACompletionBackend {
 public:
  using stream_type = cudaStream_t;
  using status_type = cudaError_t;
  using event_type = CUDAEvent;
  static constexpr cudaError_t kSuccess = cudaSuccess;

  /// Events come from `pool`, which must outlive every queue over this backend.
  explicit CUDACompletionBackend(CUDAEventPool &pool = CUDAEventPool::instance()) noexcept : pool_(&pool) {}

  /// Throws std::invalid_argument if `stream` is capturing (its work does not run until the
  /// graph is launched; ask on the stream the graph is launched on instead). Errors in asking
  /// are left to record(), which reports them to the request.
  void check_stream(cudaStream_t stream) const;

  /// The stream's device and id into `on`, an event from the pool on that device, recorded on
  /// `stream`. Returns the CUDA error that stopped it, if one did (a sticky error, an invalid
  /// stream). Never throws.
  cudaError_t record(cudaStream_t stream, CUDAEvent &event, RecordedOn &on) noexcept;

  /// As above, and if `signal.word` is set, `stream` a created stream and its device can
  /// (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS), enqueues before the event a
  /// cuStreamWriteValue64 of `signal.value` into `*signal.word` and sets `on.signalled`.
  /// Never throws.
  cudaError_t record(cudaStream_t stream, CUDAEvent &event, RecordedOn &on, const SignalSlot &signal) noexcept;

  /// `count` zeroed words of pinned, portable, mapped host memory whose device address is their
  /// host address, or nullptr (no device, no cuStreamWriteValue64, no unified addressing).
  /// Never throws. May block in the driver (cudaHostAlloc).
  std::uint64_t *allocate_signal_words(std::size_t count) noexcept;

  /// Frees what allocate_signal_words() returned (cudaFreeHost, which may wait for the device).
  /// Never throws.
  void free_signal_words(std::uint64_t *words, std::size_t count) noexcept;

  /// cudaSuccess or the work's error once it completed; nothing while it runs. Never throws.
  std::optional<cudaError_t> query(const CUDAEvent &event) noexcept;

  /// Puts the event back into the pool (destroys it if the pool refuses it). Never throws.
  void give_back(CUDAEvent &&event, int device) noexcept;

  CUDAEventPool &pool() const noexcept { return *pool_; }

 private:
  CUDAEventPool *pool_;
};

static_assert(CompletionSignalBackend<CUDACompletionBackend>);

using CompletionQueue = BasicCompletionQueue<CUDACompletionBackend>;
using Completion = BasicCompletion<CUDACompletionBackend>;

}  // namespace evpool
