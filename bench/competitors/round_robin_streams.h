// evpool competitor: shared streams handed out round-robin, as PyTorch's and RMM's stream pools do.
// Private; benchmarks only.
//
// PyTorch (c10/cuda/CUDAStream.cpp): per device and priority, 32 streams created on the device's
// first use (under a once flag), handed out by one atomic counter per device (fetch_add, modulo
// 32), never returned and never destroyed: callers share them. RMM's cuda_stream_pool is the same
// (a vector of streams and an atomic index). Release gives nothing back: there is no ownership.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

#include "evpool/handle_backend.h"

namespace evpool::competitors {

template <HandleBackend Backend, std::size_t kStreams = 32>
class RoundRobinStreams {
 public:
  using handle_type = typename Backend::handle_type;

  explicit RoundRobinStreams(Backend backend = Backend(),
                             typename Backend::options_type options = Backend::kDefaultOptions)
      : backend_(std::move(backend)), options_(std::move(options)),
        devices_(std::make_unique<Device[]>(static_cast<std::size_t>(backend_.device_count()))),
        device_count_(backend_.device_count()) {}
  RoundRobinStreams(const RoundRobinStreams &) = delete;
  RoundRobinStreams &operator=(const RoundRobinStreams &) = delete;
  ~RoundRobinStreams() {
    for (int device = 0; device < device_count_; ++device)
      if (devices_[static_cast<std::size_t>(device)].created)
        for (handle_type stream : devices_[static_cast<std::size_t>(device)].streams)
          backend_.destroy(stream);
  }

  /// A stream of a device and its place among the device's kStreams: what a caller that keeps
  /// something per stream (a waiter thread, for example) indexes it by.
  struct Slot {
    handle_type stream;
    std::size_t index;
  };

  /// The next stream of the device, shared with whoever else got it.
  handle_type Get(int device) { return GetSlot(device).stream; }

  /// The same, with its place.
  Slot GetSlot(int device) {
    Device &own = devices_[static_cast<std::size_t>(device)];
    std::call_once(own.once, [&] {
      for (handle_type &stream : own.streams) stream = backend_.create(options_, device);
      own.created = true;
    });
    // Relaxed: only the spread matters, as in PyTorch's get_idx.
    const std::size_t index = own.next.fetch_add(1, std::memory_order_relaxed) % kStreams;
    return {own.streams[index], index};
  }

 private:
  struct Device {
    std::once_flag once;
    std::array<handle_type, kStreams> streams{};
    alignas(128) std::atomic<std::size_t> next{0};
    bool created = false;
  };
  Backend backend_;
  typename Backend::options_type options_;
  std::unique_ptr<Device[]> devices_;
  int device_count_;
};

}  // namespace evpool::competitors
