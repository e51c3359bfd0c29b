// evpool competitor: a std::mutex and a std::vector of idle events per device, the shape of
// PyTorch's CUDA event pool. Private; benchmarks and differential tests only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/handle_backend.h"

namespace evpool::competitors {

template <HandleBackend Backend>
class MutexEventPool {
 public:
  using owner_type = typename Backend::owner_type;

  explicit MutexEventPool(Backend backend = Backend(),
                          typename Backend::options_type options = Backend::kDefaultOptions)
      : backend_(std::move(backend)), options_(std::move(options)),
        devices_(std::make_unique<detail::CacheLinePadded<DeviceList>[]>(
            static_cast<std::size_t>(backend_.device_count()))),
        device_count_(backend_.device_count()) {}
  MutexEventPool(const MutexEventPool &) = delete;
  MutexEventPool &operator=(const MutexEventPool &) = delete;
  ~MutexEventPool() { Purge(); }

  owner_type Get(int device) {
    DeviceList &list = devices_[device].value;
    {
      std::lock_guard<std::mutex> lock(list.mutex);
      if (!list.idle.empty()) {
        const auto handle = list.idle.back();
        list.idle.pop_back();
        return backend_.adopt(handle, device);
      }
    }
    owner_type made = backend_.adopt(backend_.create(options_, device), device);
    created_.fetch_add(1, std::memory_order_relaxed);
    return made;
  }

  void Put(owner_type &&event, int device) {
    DeviceList &list = devices_[device].value;
    std::lock_guard<std::mutex> lock(list.mutex);
    list.idle.push_back(event.release());  // a bad_alloc here leaves the event with the caller
  }

  /// Events the pool has created, for a benchmark's report.
  std::uint64_t created() const noexcept { return created_.load(std::memory_order_relaxed); }

  void Purge() {
    for (int device = 0; device < device_count_; ++device) {
      DeviceList &list = devices_[device].value;
      std::lock_guard<std::mutex> lock(list.mutex);
      for (auto handle : list.idle) backend_.destroy(handle);
      list.idle.clear();
    }
  }

 private:
  struct DeviceList {
    std::mutex mutex;
    std::vector<typename Backend::handle_type> idle;
  };

  Backend backend_;
  typename Backend::options_type options_;
  std::unique_ptr<detail::CacheLinePadded<DeviceList>[]> devices_;
  int device_count_;
  std::atomic<std::uint64_t> created_{0};  // a tally only: relaxed
};

}  // namespace evpool::competitors
