// evpool bench: what each thread of the GPU workloads (sync, schedule, graph, wait) works on, two
// non-blocking streams of its device and a small device buffer, and the bound on the work they
// queue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "evpool/cuda_error.h"

namespace evpool::bench {

/// The bytes of the buffer a schedule step writes: a unit of GPU work as small as it gets.
inline constexpr std::size_t kScheduleBufferBytes = 256;

struct ThreadStreams {
  int device = 0;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  void *buffer = nullptr;  // kScheduleBufferBytes on `device`, written by schedule and graph

  /// Creates both streams and the buffer on `device`, which becomes the caller's current device.
  /// Throws CUDAError.
  static ThreadStreams open(int device) {
    ThreadStreams streams;
    streams.device = device;
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&streams.a, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaStreamCreateWithFlags(&streams.b, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMalloc(&streams.buffer, kScheduleBufferBytes), "cudaMalloc");
    return streams;
  }

  /// Waits for the queued work and frees everything; the caller's current device becomes `device`.
  void close() noexcept {
    cudaSetDevice(device);
    cudaStreamSynchronize(a);
    cudaStreamSynchronize(b);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaFree(buffer);
  }

 private:
  static void check(cudaError_t error, const char *call) {
    if (error != cudaSuccess) throw CUDAError(error, call);
  }
};

/// Keeps a thread's streams from queueing without limit. The host enqueues far faster than the GPU
/// retires: unbounded, the queues grow until the driver blocks the thread inside some CUDA call,
/// and the run measures the queue. Waiting for the last stream of a step every kInterval steps
/// keeps them short and puts the wait in one known place.
class QueueBound {
 public:
  static constexpr int kInterval = 256;

  /// Counts a step whose work all ends on `last`; every kInterval-th, waits for it.
  cudaError_t step(cudaStream_t last) {
    if (++steps_ < kInterval) return cudaSuccess;
    steps_ = 0;
    return cudaStreamSynchronize(last);
  }

 private:
  int steps_ = 0;
};

/// The first error among the CUDA calls of a measured loop: the loop records failures and goes on,
/// and the run is reported as failed after it, rather than measuring calls that did nothing.
class FirstError {
 public:
  void operator()(cudaError_t error) {
    if (first_ == cudaSuccess) first_ = error;
  }
  cudaError_t error() const { return first_; }

 private:
  cudaError_t first_ = cudaSuccess;
};

}  // namespace evpool::bench
