// evpool: CUDAStreamBackend, the backend of real CUDA streams, and StreamOptions.
//
// Design rationale
// ----------------
// A stream pool is the event pool's core over this backend: the same caches, depots, leases and
// checks. Streams differ from events in three ways, each answered here and used by the core only
// where a backend offers it (event_backend.h):
// - they are created with a priority beside their flags: StreamOptions, the pool's options;
// - they can be busy: a stream put back while its work is pending must not be handed out while
//   an idle one can be (has_pending_work, one cudaStreamQuery);
// - a bare handle can tell its device (query_device, cudaStreamGetDevice): DALI's Put(-1) asks
//   every stream, evpool only an adopted one (a pooled CUDAStream remembers its device).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "evpool/cuda_stream.h"
#include "evpool/cuda_error.h"
#include "evpool/export.h"

namespace evpool {

/// What a stream pool creates its streams with.
struct StreamOptions {
  /// cudaStreamNonBlocking (DALI's pool creates only these) or cudaStreamDefault.
  unsigned flags = cudaStreamNonBlocking;
  /// In the device's range, cudaDeviceGetStreamPriorityRange: 0 is the least, lower is greater.
  int priority = 0;
  friend bool operator==(const StreamOptions &, const StreamOptions &) = default;
};

/// Creates, queries and destroys CUDA streams through the CUDA runtime. Stateless; every copy is
/// the same. Every member is thread-safe (the CUDA runtime is).
struct EVPOOL_API CUDAStreamBackend {
  using handle_type = cudaStream_t;
  using event_type = CUDAStream;
  using options_type = StreamOptions;
  static constexpr StreamOptions kDefaultOptions{};

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

  /// Whether work enqueued on `handle` is still pending: cudaStreamQuery returns
  /// cudaErrorNotReady (cleared from the thread's last error, where the runtime leaves it). Any
  /// other error reads as idle: the holder's own next call on the stream reports it.
  bool has_pending_work(cudaStream_t handle) const noexcept;
  /// cudaStreamGetDevice; -1 if it fails (the error is cleared).
  int query_device(cudaStream_t handle) const noexcept;
};

}  // namespace evpool
