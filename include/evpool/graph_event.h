// evpool: events that a CUDA graph owns, for dependencies that cross a capture's boundary.
//
// Design rationale
// ----------------
// A capture cannot wait on work outside it, nor work outside wait on an event recorded inside it
// (evpool::wait refuses both, detail/capture_aware_wait.h). CUDA's answer is the external node: a
// node that records a real event, or waits on one, at every launch of the graph. The event must
// then live as long as the graph, and nothing in the graph says when that ends. So these
// functions lease an event of the capturing stream's device from the pool and give the lease to
// the capture's graph (cudaUserObjectCreate, cudaGraphRetainUserObject): when the last graph and
// executable graph holding it are destroyed, CUDA destroys the user object on one of its own
// threads, which only hands the lease over (deferred_work.h); the event is back in its pool at
// the pool's next stats(), Trim, Purge or Get off its fast path, or at run_deferred_work().
//
// Graph to eager work:                        Eager work to graph:
//
//   cudaStreamBeginCapture(s, mode);            cudaStreamBeginCapture(s, mode);
//   step<<<g, b, 0, s>>>();                     GraphEvent input = wait_external(s);
//   GraphEvent done = record_external(s);       step<<<g, b, 0, s>>>();
//   cudaStreamEndCapture(s, &graph);            cudaStreamEndCapture(s, &graph);
//   ... launch; then                            ... each time: produce on p, then
//   cudaStreamWaitEvent(consumer, done);        cudaEventRecord(input, p); launch on s
//
// (docs/graphs.md has both in full.)
#pragma once

#include <cuda_runtime_api.h>

#include "evpool/cuda_event_pool.h"
#include "evpool/export.h"

namespace evpool {

/// A pooled event that a graph owns: a view, valid while the graph (or an executable graph made
/// from it) lives. Record it or wait on it as any event; never destroy it or Put it.
class GraphEvent {
 public:
  GraphEvent(cudaEvent_t event, int device) noexcept : event_(event), device_(device) {}
  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }  // NOLINT: like CUDAEvent
  int device_id() const noexcept { return device_; }

 private:
  cudaEvent_t event_;
  int device_;
};

/// Inside a capture on `capturing`: adds a node that records a pooled event at each launch (an
/// external record node), and gives the event to the capture's graph. Work outside the graph
/// waits on it after a launch (cudaStreamWaitEvent). Thread-safe. Throws std::invalid_argument,
/// holding nothing, unless `capturing` is in an active capture; CUDAError when a CUDA call fails
/// (once the graph owns the event, it stays the graph's and comes back with it).
EVPOOL_API GraphEvent record_external(cudaStream_t capturing, CUDAEventPool &pool);
/// record_external(capturing, CUDAEventPool::instance()).
EVPOOL_API GraphEvent record_external(cudaStream_t capturing);

/// Inside a capture on `capturing`: adds a node that waits, at each launch, for the pooled
/// event's last record before it, and gives the event to the capture's graph. Work outside the
/// graph records it before each launch (cudaEventRecord); a launch before any record does not
/// wait. Thread-safety and errors as record_external.
EVPOOL_API GraphEvent wait_external(cudaStream_t capturing, CUDAEventPool &pool);
/// wait_external(capturing, CUDAEventPool::instance()).
EVPOOL_API GraphEvent wait_external(cudaStream_t capturing);

}  // namespace evpool
