// evpool example scheduler: OwnedStreamLease, a stream got from a pool of owned streams, put back
// when the lease ends.
//
// Design rationale
// ----------------
// evpool's CUDAStreamPool hands out leases (CUDAStreamLease) that go back by themselves. The
// pools it is measured against (bench/competitors/: DALI's spinlock design, the mutex pool) hand
// out owned streams, Get and Put, as DALI's pool does. The executor holds a stream as a lease
// whose end hands it back (stack.h), so this gives those pools one.
//
// A Put that throws (the pools allocate a node or grow a vector under their lock) leaves the
// stream with the lease, whose CUDAStream then destroys it: the end of a lease never throws and
// never loses a stream. CUDA destroys a stream with work pending once that work is done.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "evpool/cuda_stream.h"

namespace evpool::example {

/// Move-only. `Pool` has Put(CUDAStream &&, int device).
template <class Pool>
class OwnedStreamLease {
 public:
  OwnedStreamLease(Pool &pool, CUDAStream &&stream) noexcept : pool_(&pool), stream_(std::move(stream)) {}
  OwnedStreamLease(OwnedStreamLease &&other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), stream_(std::move(other.stream_)) {}
  OwnedStreamLease &operator=(OwnedStreamLease &&) = delete;
  ~OwnedStreamLease() {
    if (pool_ == nullptr || !stream_) return;
    try {
      const int device = stream_.device_id();
      pool_->Put(std::move(stream_), device);
    } catch (...) {
      // The pool refused it: stream_ still owns the stream, and destroys it (see the top).
    }
  }

  operator cudaStream_t() const noexcept { return stream_; }  // NOLINT: as CUDAStreamLease

 private:
  Pool *pool_;
  CUDAStream stream_;
};

}  // namespace evpool::example
