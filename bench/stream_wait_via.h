// evpool bench: evpool::wait's steps (src/stream_wait.cc) over any event source, so that the `wait`
// workload can set the library's function against the very same steps over the thread-private
// stacks: the two differ only in where the event comes from. Keep it in step with
// src/stream_wait.cc and src/scoped_current_device.h (private to the library, hence copied).
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>
#include <utility>

#include "evpool/cuda_error.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/stream_wait.h"

namespace evpool::bench {

namespace stream_wait_detail {

inline void check_cuda(cudaError_t error, const char *call) {
  if (error != cudaSuccess) throw CUDAError(error, call);
}

// detail::ScopedCurrentDevice: makes `device` current for the scope, unless it is already.
class ScopedCurrentDevice {
 public:
  explicit ScopedCurrentDevice(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (device != -1 && device != previous_) {
      check_cuda(cudaSetDevice(device), "cudaSetDevice");
      switched_ = true;
    }
  }
  ScopedCurrentDevice(const ScopedCurrentDevice &) = delete;
  ScopedCurrentDevice &operator=(const ScopedCurrentDevice &) = delete;
  ~ScopedCurrentDevice() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// The device of `stream`; the special handles name a stream of the caller's current device.
inline int device_of(cudaStream_t stream, int current_device) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return current_device;
  int device = -1;
  check_cuda(cudaStreamGetDevice(stream, &device), "cudaStreamGetDevice");
  return device;
}

// An event of `source` that goes back to it when the scope ends, as the library's Lease does.
template <class Source>
class Borrowed {
 public:
  Borrowed(Source &source, int device) : source_(source), device_(device), event_(source.Get(device)) {}
  Borrowed(const Borrowed &) = delete;
  Borrowed &operator=(const Borrowed &) = delete;
  ~Borrowed() { source_.Put(std::move(event_), device_); }
  cudaEvent_t get() const noexcept { return event_.get(); }

 private:
  Source &source_;
  int device_;
  decltype(std::declval<Source &>().Get(0)) event_;
};

}  // namespace stream_wait_detail

/// evpool::wait(consumer, producer, pool) with the event from `source` (Get(device) and
/// Put(event, device)). Throws CUDAError as evpool::wait does.
template <class Source>
void wait_via(cudaStream_t consumer, cudaStream_t producer, Source &source) {
  using namespace stream_wait_detail;
  int caller_device = -1;
  check_cuda(cudaGetDevice(&caller_device), "cudaGetDevice");
  const int producer_device = device_of(producer, caller_device);
  const int consumer_device = device_of(consumer, caller_device);
  Borrowed<Source> event(source, producer_device);  // back to the source however this ends
  {
    ScopedCurrentDevice on_producer(producer_device);
    check_cuda(cudaEventRecord(event.get(), producer), "cudaEventRecord");
  }
  ScopedCurrentDevice on_consumer(consumer_device);
  check_cuda(cudaStreamWaitEvent(consumer, event.get(), 0), "cudaStreamWaitEvent");
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
