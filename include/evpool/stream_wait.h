// evpool: wait(consumer, producer), the cross-stream dependency every scheduler step runs.
#pragma once

#include <cuda_runtime_api.h>

#include "evpool/cuda_error.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/export.h"

namespace evpool {

/// Makes `consumer` wait for all work enqueued on `producer` so far, without blocking the host:
/// gets an event of the producer's device from `pool`, records it on `producer`, makes `consumer`
/// wait on it and returns it to the pool. The streams may belong to different devices. The special
/// handles are understood as CUDA defines them, relative to the caller's current device: 0 and
/// cudaStreamLegacy (the legacy default stream) and cudaStreamPerThread. The caller's current
/// device is the same on return, also when an error is thrown.
///
/// Under stream capture (any mode) it makes no call that CUDA refuses while capturing. Both
/// streams in one capture, or the producer capturing and the consumer not: the wait becomes an
/// edge of that capture's graph (the consumer joins it), and the graph keeps the event until it is
/// destroyed (docs/graphs.md says why). A wait across a capture's boundary (the consumer capturing and the producer not, two
/// captures, or an invalidated one) throws std::invalid_argument naming both streams' capture
/// states, before any call that would invalidate a capture; graph_event.h's functions are what
/// such a dependency takes instead.
/// Thread-safe. Throws CUDAError when a CUDA call fails (the event still returns to the pool).
EVPOOL_API void wait(cudaStream_t consumer, cudaStream_t producer, CUDAEventPool &pool);

/// wait(consumer, producer, CUDAEventPool::instance()).
EVPOOL_API void wait(cudaStream_t consumer, cudaStream_t producer);

}  // namespace evpool
