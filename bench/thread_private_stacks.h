// evpool bench: thread-private stacks of idle events, one per thread and device, shared with no
// one. Not a pool (an event put on one thread can never be got on another), but the limit that no
// shared design can beat: what the same work costs with no synchronisation at all.
//
// Being the limit requires that no two threads ever write within 128 bytes of each other (the
// false-sharing range, see evpool/detail/cache_line_padded.h): otherwise this measures cache-line
// transfers, not their absence. So each thread's state is its own allocation, aligned to 128 bytes
// and a multiple of 128 long, and its storage never grows: a fixed number of idle slots per device,
// in a second allocation of the same kind. (The first version kept a std::vector per thread and
// device; those vector objects were heap blocks 32 bytes apart, their end pointers written on every
// Get and Put by different threads, and 16 threads reached only 2.2 times one thread on the H200.)
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/handle_backend.h"

namespace evpool::bench {

/// `Capacity`: the idle events kept per thread and device; a Put beyond it destroys the event, as
/// a pool's idle limit does. The workloads hold at most 64 events per thread.
template <HandleBackend Backend, std::size_t Capacity = 64>
class ThreadPrivateStacks {
 public:
  using owner_type = typename Backend::owner_type;
  using handle_type = typename Backend::handle_type;
  static constexpr std::size_t kCapacity = Capacity;

  /// One thread's stacks, one per device. Only its owner thread may call Get and Put.
  class alignas(detail::kFalseSharingRange) OwnStacks {
   public:
    OwnStacks(Backend backend, typename Backend::options_type options)
        : backend_(std::move(backend)), options_(std::move(options)), device_count_(backend_.device_count()),
          devices_(std::make_unique<DeviceStack[]>(static_cast<std::size_t>(device_count_))) {}
    OwnStacks(const OwnStacks &) = delete;
    OwnStacks &operator=(const OwnStacks &) = delete;
    ~OwnStacks() {
      for (int device = 0; device < device_count_; ++device)
        for (std::size_t i = 0; i < devices_[device].size; ++i) backend_.destroy(devices_[device].idle[i]);
    }

    /// The most recently put idle event of `device`, or a new one.
    owner_type Get(int device) {
      DeviceStack &stack = devices_[device];
      if (stack.size == 0) return backend_.adopt(backend_.create(options_, device), device);
      return backend_.adopt(stack.idle[--stack.size], device);
    }

    /// Keeps `event` idle under `device`, or destroys it if kCapacity are idle there already.
    void Put(owner_type &&event, int device) {
      DeviceStack &stack = devices_[device];
      if (stack.size == kCapacity)
        backend_.destroy(event.release());
      else
        stack.idle[stack.size++] = event.release();
    }

   private:
    // What Get and Put write; this object's other members are only read after construction.
    struct alignas(detail::kFalseSharingRange) DeviceStack {
      std::size_t size = 0;
      handle_type idle[kCapacity];
    };

    Backend backend_;
    typename Backend::options_type options_;
    int device_count_;
    std::unique_ptr<DeviceStack[]> devices_;
  };

  ThreadPrivateStacks(const Backend &backend, typename Backend::options_type options, int threads) {
    per_thread_.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) per_thread_.push_back(std::make_unique<OwnStacks>(backend, options));
  }

  /// The stacks of `thread`, for that thread alone (and for set-up before the threads run).
  OwnStacks &of_thread(int thread) { return *per_thread_[static_cast<std::size_t>(thread)]; }

 private:
  std::vector<std::unique_ptr<OwnStacks>> per_thread_;
};

}  // namespace evpool::bench
