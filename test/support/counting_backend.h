// evpool test support: a backend adapter that counts the events created and destroyed through it,
// so that benchmarks report every variant's idle memory in one unit and soak tests can check that
// no event is lost, whatever the backend. Private; benchmarks and tests only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "evpool/handle_backend.h"

namespace evpool::testing_support {

template <HandleBackend Inner>
class CountingBackend : public Inner {
 public:
  using typename Inner::owner_type;
  using typename Inner::handle_type;

  explicit CountingBackend(Inner inner = Inner())
      : Inner(std::move(inner)), counts_(std::make_shared<Counts>()) {}

  handle_type create(const typename Inner::options_type &options, int device) {
    handle_type handle = Inner::create(options, device);
    // Relaxed: statistics, read after the threads that change them have stopped.
    counts_->created.fetch_add(1, std::memory_order_relaxed);
    return handle;
  }

  void destroy(handle_type handle) noexcept {
    Inner::destroy(handle);
    counts_->destroyed.fetch_add(1, std::memory_order_relaxed);
  }

  /// Events created through this backend (and its copies).
  std::uint64_t created() const noexcept { return counts_->created.load(std::memory_order_relaxed); }
  /// Events the pool destroyed through this backend; not those destroyed by their holders.
  std::uint64_t destroyed() const noexcept { return counts_->destroyed.load(std::memory_order_relaxed); }

 private:
  struct Counts {
    std::atomic<std::uint64_t> created{0};
    std::atomic<std::uint64_t> destroyed{0};
  };
  std::shared_ptr<Counts> counts_;
};

}  // namespace evpool::testing_support
