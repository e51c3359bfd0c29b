// evpool bench: the stream pools the stream benchmark compares, behind one shape: acquire(thread,
// device) gives a Held, stream(held) its cudaStream_t, release(held) gives it back; for handoff,
// hand_over(held) turns it into a bare handle and take_back(handle) ends it on another thread.
//
//   evpool            CUDAStreamPool: exclusive leases, thread caches, busy streams never re-handed
//   evpool-at-once    the same pool with StreamReuse::kAtOnce, asking no stream: what asking costs
//   evpool-synced     the default pool, each synced unit ending with the lease's
//                     synchronize_and_reset(): the hand-back vouches for the stream, and the next
//                     Get asks nothing (synced and mixed only; elsewhere it is evpool)
//   spinlock          DALI's CUDAStreamPool design (competitors/spinlock_event_pool.h over streams)
//   mutex             std::mutex + a vector per device
//   round-robin       32 shared streams per device, PyTorch and RMM style: nothing is exclusive
//   private           one stream per thread, created before the timing: the limit (no sharing,
//                     no pool); not in handoff, where streams change threads
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "competitors/mutex_event_pool.h"
#include "competitors/round_robin_streams.h"
#include "competitors/spinlock_event_pool.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_stream_backend.h"
#include "evpool/cuda_stream_pool.h"

namespace evpool::bench {

struct EvpoolStreams {
  static constexpr std::string_view kName = "evpool";
  using Held = CUDAStreamLease;
  explicit EvpoolStreams(int /*threads*/, StreamReuse reuse = StreamReuse::kWhenIdle)
      : pool(cudaStreamNonBlocking, 0, kUnlimitedIdle, Checks::kDefault, reuse) {}
  Held acquire(int, int device) { return pool.Get(device); }
  static cudaStream_t stream(const Held &held) { return held; }
  void release(Held &&held) { held.reset(); }
  cudaStream_t hand_over(Held &&held) { return held.release().release(); }
  void take_back(cudaStream_t handle, int device) { pool.Put(CUDAStream(handle, device), device); }
  CUDAStreamPool pool;
};

// The same pool, trusting its callers to hand streams back idle: what asking costs.
struct EvpoolAtOnceStreams : EvpoolStreams {
  static constexpr std::string_view kName = "evpool-at-once";
  explicit EvpoolAtOnceStreams(int threads) : EvpoolStreams(threads, StreamReuse::kAtOnce) {}
};

// The default pool, a synced unit synchronising through the lease: no query on the next Get.
struct EvpoolSyncedStreams : EvpoolStreams {
  static constexpr std::string_view kName = "evpool-synced";
  using EvpoolStreams::EvpoolStreams;
  void synchronize_and_release(Held &&held) { held.synchronize_and_reset(); }
};

// DALI's spinlock design and the mutex pool hand out owned streams and take them back.
template <class Pool, const char *kNameText>
struct OwningStreams {
  static constexpr std::string_view kName = kNameText;
  using Held = CUDAStream;
  explicit OwningStreams(int /*threads*/) {}
  Held acquire(int, int device) { return pool.Get(device); }
  static cudaStream_t stream(const Held &held) { return held; }
  void release(Held &&held) {
    const int device = held.device_id();
    pool.Put(std::move(held), device);
  }
  cudaStream_t hand_over(Held &&held) { return held.release(); }
  void take_back(cudaStream_t handle, int device) { pool.Put(CUDAStream(handle, device), device); }
  Pool pool;
};
inline constexpr char kSpinlockName[] = "spinlock";
inline constexpr char kMutexName[] = "mutex";
using SpinlockStreams = OwningStreams<competitors::SpinlockEventPool<CUDAStreamBackend>, kSpinlockName>;
using MutexStreams = OwningStreams<competitors::MutexEventPool<CUDAStreamBackend>, kMutexName>;

struct RoundRobinStreamVariant {
  static constexpr std::string_view kName = "round-robin";
  using Held = cudaStream_t;
  explicit RoundRobinStreamVariant(int /*threads*/) {}
  Held acquire(int, int device) { return pool.Get(device); }
  static cudaStream_t stream(Held held) { return held; }
  void release(Held &&) {}
  cudaStream_t hand_over(Held &&held) { return held; }
  void take_back(cudaStream_t, int) {}
  competitors::RoundRobinStreams<CUDAStreamBackend> pool;
};

struct PrivateStreams {
  static constexpr std::string_view kName = "private";
  using Held = cudaStream_t;
  /// One non-blocking stream per thread, on device 0 (where every stream workload runs).
  explicit PrivateStreams(int threads) : own(static_cast<std::size_t>(threads)) {
    for (cudaStream_t &stream : own) stream = backend.create(StreamOptions{}, 0);
  }
  ~PrivateStreams() {
    for (cudaStream_t stream : own) backend.destroy(stream);
  }
  PrivateStreams(const PrivateStreams &) = delete;
  PrivateStreams &operator=(const PrivateStreams &) = delete;
  Held acquire(int thread, int) { return own[static_cast<std::size_t>(thread)]; }
  static cudaStream_t stream(Held held) { return held; }
  void release(Held &&) {}
  CUDAStreamBackend backend;
  std::vector<cudaStream_t> own;
};

}  // namespace evpool::bench
