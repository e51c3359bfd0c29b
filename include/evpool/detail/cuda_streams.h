// evpool: CUDA's streams as capture_aware_wait.h's seam: capture queries and device lookups that
// capture allows, records and waits, and handing an owner to a capture's graph. Exported for the
// benchmark, which sets evpool::wait's very steps over other event sources; private otherwise.
//
// Design rationale
// ----------------
// The queries go through the driver API, resolved once through the runtime's entry-point lookup
// (no link to libcuda): cuStreamGetCaptureInfo and cuStreamGetDevice cost about 35 and 27 ns
// against the runtime's 85 and 47 (H200 host, CUDA 13), so that evpool::wait asks for both
// streams' capture states and devices in less time than it used to take for the devices alone.
// cuStreamGetDevice is refused while the stream captures (and invalidates the capture); the
// stream's context names its device then (cuStreamGetCtx, then cuCtxGetDevice with the context
// pushed: allowed). The
// special handles (0, cudaStreamLegacy, cudaStreamPerThread) mean the caller's current device, and
// are asked through the runtime, which initialises the thread's context if it must.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "evpool/detail/capture_aware_wait.h"
#include "evpool/export.h"

namespace evpool::detail {

/// Thread-safe: stateless but for the entry points, resolved once per process.
class EVPOOL_API CudaStreams {
 public:
  using stream_type = cudaStream_t;
  using event_type = cudaEvent_t;

  /// Throws CUDAError.
  StreamCapture capture_of(cudaStream_t stream);
  /// Throws CUDAError.
  int device_of(cudaStream_t stream, const StreamCapture &capture);
  /// On `device` (made current for the call if it is not). Throws CUDAError.
  void record(cudaEvent_t event, cudaStream_t stream, int device, bool external);
  void wait(cudaStream_t stream, cudaEvent_t event, int device, bool external);
  /// A user object whose destructor defers `owner`, moved into the capture's graph. `owner` is
  /// no longer the caller's, also when this throws CUDAError: then it is deferred.
  void give_to_graph(cudaStream_t stream, DeferredWork &owner);
  bool can_join_capture(cudaStream_t stream) const noexcept {
    return stream != nullptr && stream != cudaStreamLegacy;
  }
  std::string describe(cudaStream_t stream);
};

}  // namespace evpool::detail
