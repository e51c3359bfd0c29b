// evpool: CUDAStreamBackend, the backend of real CUDA streams, and StreamOptions.
//
// Design rationale
// ----------------
// A stream pool is the event pool's core over this backend: the same caches, depots, leases and
// checks. Streams differ from events in three ways, each answered here and used by the core only
// where a backend offers it (event_backend.h):
// - they are created with a priority beside their flags: StreamOptions, the pool's options;
// - they can be busy: a stream put back while its work is pending must not be handed out while
//   an idle one can be (has_pending_work). The driver answers that (cuStreamQuery) under a lock of
//   its own, which a scheduler's threads contend for with every launch and synchronisation. So the
//   pool asks no driver on a Get: each hand-back enqueues a write of a sequence number into pinned
//   host memory behind the holder's work (mark_handed_back), and has_pending_work reads it
//   (src/stream_marks.h has the measurements and the records' life). Only a stream without a
//   mark is asked of the driver. StreamReuse::kAtOnce skips both: for callers that synchronise
//   their streams before handing them back, or do not mind queueing behind the last holder;
// - a bare handle can tell its device (query_device, cudaStreamGetDevice): DALI's Put(-1) asks
//   every stream, evpool only an adopted one (a pooled CUDAStream remembers its device).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>

#include "evpool/cuda_stream.h"
#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

namespace detail {
class StreamMarks;
}

/// When a pool hands a stream out again.
enum class StreamReuse {
  /// Only once its work is done: a hand-back marks where the holder's work ends, and Get reads the
  /// mark (see above).
  kWhenIdle,
  /// At once: the caller hands streams back idle (synchronised), or does not mind a stream whose
  /// last holder's work is still queued; nothing is marked or read.
  kAtOnce,
};

/// What a stream pool creates its streams with.
struct StreamOptions {
  /// cudaStreamNonBlocking (DALI's pool creates only these) or cudaStreamDefault.
  unsigned flags = cudaStreamNonBlocking;
  /// In the device's range, cudaDeviceGetStreamPriorityRange: 0 is the least, lower is greater.
  int priority = 0;
  friend bool operator==(const StreamOptions &, const StreamOptions &) = default;
};

/// Creates, marks, asks and destroys CUDA streams through the CUDA runtime and driver. Its state:
/// whether it asks streams (StreamReuse), and the marks of the streams its pool keeps, shared by
/// its copies. Every member is thread-safe; those that take a handle are called by its holder.
struct EVPOOL_API CUDAStreamBackend {
  using handle_type = cudaStream_t;
  using event_type = CUDAStream;
  using options_type = StreamOptions;
  static constexpr StreamOptions kDefaultOptions{};

  /// Throws std::bad_alloc.
  explicit CUDAStreamBackend(StreamReuse reuse = StreamReuse::kWhenIdle);

  /// std::invalid_argument, naming the value, for flags other than cudaStreamDefault and
  /// cudaStreamNonBlocking, or a priority outside the current device's range; CUDAError if CUDA
  /// cannot tell the range.
  void validate_options(const StreamOptions &options) const;
  /// A new stream on `device`, with its mark; the caller's current device is restored. Throws
  /// CUDAError.
  cudaStream_t create(const StreamOptions &options, int device);
  /// Forgets the stream's mark and destroys it (work pending on it completes first, in CUDA);
  /// errors are ignored.
  void destroy(cudaStream_t handle) noexcept;
  CUDAStream adopt(cudaStream_t handle, int device) noexcept { return CUDAStream(handle, device); }
  /// cudaGetDeviceCount; throws CUDAError (no driver, no device).
  int device_count() const;
  /// cudaGetDevice; throws CUDAError.
  int current_device() const;

  /// Whether work enqueued on `handle` before its last hand-back is still pending: its mark, read
  /// from host memory; without one, cuStreamQuery (in relaxed capture mode, so that a query made
  /// while another thread captures in global mode does not invalidate that capture), where any
  /// error but "not ready" reads as idle (the holder's own next call reports it). Always false
  /// with StreamReuse::kAtOnce.
  bool has_pending_work(cudaStream_t handle) const noexcept;
  /// The holder hands `handle` back: a write of its mark's next number is enqueued behind its work
  /// (a stream the pool did not create gets a mark here). Nothing with kAtOnce.
  void mark_handed_back(cudaStream_t handle) noexcept;
  /// `handle` leaves the pool without being destroyed (a lease's release()): its mark goes.
  void let_go(cudaStream_t handle) noexcept;
  /// cuStreamGetDevice, in relaxed capture mode; -1 if it fails.
  int query_device(cudaStream_t handle) const noexcept;

  StreamReuse reuse;

 private:
  std::shared_ptr<detail::StreamMarks> marks_;  // null with kAtOnce
};

}  // namespace evpool
