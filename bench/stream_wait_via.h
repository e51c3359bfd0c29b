// evpool bench: evpool::wait's very steps (detail/capture_aware_wait.h over detail/cuda_streams.h,
// as src/stream_wait.cc runs them) over any event source, so that the `wait` workload sets the
// library's function against the same steps over the thread-private stacks: the two differ only
// in where the event comes from.
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>
#include <utility>

#include "evpool/cuda_event_pool.h"
#include "evpool/detail/capture_aware_wait.h"
#include "evpool/detail/cuda_streams.h"
#include "evpool/stream_wait.h"

namespace evpool::bench {

/// Lends `Source`'s events (Get(device), Put(event, device)) as the library's pools lend leases:
/// Lease(device) gives an owner that puts the event back when it dies.
template <class Source>
class LeasingSource {
 public:
  class Borrowed {
   public:
    Borrowed(Source &source, int device) : source_(&source), device_(device), event_(source.Get(device)) {}
    Borrowed(Borrowed &&other) noexcept
        : source_(std::exchange(other.source_, nullptr)), device_(other.device_),
          event_(std::move(other.event_)) {}
    Borrowed &operator=(Borrowed &&) = delete;
    ~Borrowed() {
      if (source_ != nullptr) source_->Put(std::move(event_), device_);
    }
    cudaEvent_t get() const noexcept { return event_.get(); }

   private:
    Source *source_;
    int device_;
    decltype(std::declval<Source &>().Get(0)) event_;
  };

  explicit LeasingSource(Source &source) noexcept : source_(source) {}
  Borrowed Lease(int device) { return Borrowed(source_, device); }

 private:
  Source &source_;
};

/// evpool::wait(consumer, producer, pool) with the event from `source`. Throws as evpool::wait.
template <class Source>
void wait_via(cudaStream_t consumer, cudaStream_t producer, Source &source) {
  detail::CudaStreams streams;
  LeasingSource<Source> leasing(source);
  detail::capture_aware_wait(streams, consumer, producer, leasing);
}

/// The `wait` workload's step: the library's evpool::wait for its own pool, wait_via otherwise.
template <class Source>
void wait_through(cudaStream_t consumer, cudaStream_t producer, Source &source) {
  if constexpr (std::is_same_v<Source, CUDAEventPool>)
    evpool::wait(consumer, producer, source);
  else
    wait_via(consumer, producer, source);
}

}  // namespace evpool::bench
