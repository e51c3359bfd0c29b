// evpool: CUDAStreamBackend, the backend of real CUDA streams, and StreamOptions.
//
// Design rationale
// ----------------
// A stream pool is the core of the event pool, BasicHandlePool, over this backend: the same caches,
// depots, leases and checks. Streams differ from events in three ways, each answered here and used
// by the core only where a backend offers it (handle_backend.h):
// - they are created with a priority beside their flags: StreamOptions, the pool's options;
// - they can be busy: a stream put back while its work is pending must not be handed out while
//   an idle one can be (has_pending_work, one cuStreamQuery). The driver answers that under a
//   lock of its own: 161 ns a query on one thread of the H200 host, and 1.5 M queries a second
//   over 16 threads, which caps a pool that asks once per Get there. So the asking is the
//   pool's choice (StreamReuse): a caller that synchronises its streams before handing them
//   back says so, and its Gets ask nothing;
// - a bare handle can tell its device (query_device, cudaStreamGetDevice): DALI's Put(-1) asks
//   every stream, evpool only an adopted one (a pooled CUDAStream remembers its device).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/cuda_stream.h"
#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

/// When a pool hands a stream out again.
enum class StreamReuse {
  /// Only once its work is done: Get asks the stream (a driver query, see above).
  kWhenIdle,
  /// At once: the caller hands streams back idle (synchronised), or does not mind a stream whose
  /// last holder's work is still queued; Get asks nothing.
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

/// Creates, queries and destroys CUDA streams through the CUDA runtime and driver. Its one state
/// is whether it asks streams (StreamReuse). Every member is thread-safe (CUDA is).
struct EVPOOL_API CUDAStreamBackend {
  using handle_type = cudaStream_t;
  using owner_type = CUDAStream;
  using options_type = StreamOptions;
  static constexpr StreamOptions kDefaultOptions{};
  static constexpr const char *kHandleNoun = "stream";  // in the pool's error messages

  /// std::invalid_argument, naming the value, for flags other than cudaStreamDefault and
  /// cudaStreamNonBlocking, or a priority outside the current device's range; CUDAError if CUDA
  /// cannot tell the range.
  void validate_options(const StreamOptions &options) const;
  /// A new stream on `device`; the caller's current device is restored. Throws CUDAError.
  cudaStream_t create(const StreamOptions &options, int device);
  /// Destroys `handle` (work pending on it completes first, in CUDA); errors are ignored.
  void destroy(cudaStream_t handle) noexcept;
  CUDAStream adopt(cudaStream_t handle, int device) noexcept { return CUDAStream(handle, device); }
  /// cudaGetDeviceCount; throws CUDAError (no driver, no device).
  int device_count() const;
  /// cudaGetDevice; throws CUDAError.
  int current_device() const;

  /// Whether work enqueued on `handle` is still pending (cuStreamQuery says not ready); always
  /// false with StreamReuse::kAtOnce. Asked in relaxed capture mode, so that a query made while
  /// another thread captures in global mode does not invalidate that capture (a pooled stream is
  /// not being captured). Any error but "not ready" reads as idle: the holder's own next call on
  /// the stream reports it.
  bool has_pending_work(cudaStream_t handle) const noexcept;
  /// cuStreamGetDevice, in relaxed capture mode; -1 if it fails.
  int query_device(cudaStream_t handle) const noexcept;

  StreamReuse reuse = StreamReuse::kWhenIdle;
};

}  // namespace evpool
