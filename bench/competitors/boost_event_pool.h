// evpool competitor: a boost::lockfree::stack of idle events per device, as HPX and pika pool
// their CUDA events. Private; benchmarks and differential tests only.
//
// Boost's stack links heap nodes by pointer with a 16-bit tag stolen from the pointer's top bits
// (48-bit address assumption) and keeps its own node free-list.
#pragma once

#include <boost/lockfree/stack.hpp>

#include <cstddef>
#include <memory>
#include <utility>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/handle_backend.h"

namespace evpool::competitors {

template <HandleBackend Backend>
class BoostLockfreeEventPool {
 public:
  using owner_type = typename Backend::owner_type;

  explicit BoostLockfreeEventPool(Backend backend = Backend(),
                                  typename Backend::options_type options = Backend::kDefaultOptions)
      : backend_(std::move(backend)), options_(std::move(options)), device_count_(backend_.device_count()),
        devices_(std::make_unique<std::unique_ptr<Stack>[]>(static_cast<std::size_t>(device_count_))) {
    for (int device = 0; device < device_count_; ++device)
      devices_[device] = std::make_unique<Stack>(kInitialNodes);
  }
  BoostLockfreeEventPool(const BoostLockfreeEventPool &) = delete;
  BoostLockfreeEventPool &operator=(const BoostLockfreeEventPool &) = delete;
  ~BoostLockfreeEventPool() { Purge(); }

  owner_type Get(int device) {
    typename Backend::handle_type handle;
    if (devices_[device]->pop(handle)) return backend_.adopt(handle, device);
    return backend_.adopt(backend_.create(options_, device), device);
  }

  void Put(owner_type &&event, int device) {
    // push copies the handle first and only then allocates; release only once it succeeded.
    if (!devices_[device]->push(event.get())) throw std::bad_alloc();
    event.release();
  }

  void Purge() {
    for (int device = 0; device < device_count_; ++device)
      devices_[device]->consume_all([this](auto handle) { backend_.destroy(handle); });
  }

 private:
  using Stack = boost::lockfree::stack<typename Backend::handle_type>;
  static constexpr std::size_t kInitialNodes = 64;

  Backend backend_;
  typename Backend::options_type options_;
  int device_count_;
  std::unique_ptr<std::unique_ptr<Stack>[]> devices_;  // each stack is cache-line aligned by Boost
};

}  // namespace evpool::competitors
