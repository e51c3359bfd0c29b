// evpool bench: a backend adapter that counts the events created through it, so that every
// variant reports the idle memory it costs in the same unit, whatever its backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "evpool/event_backend.h"

namespace evpool::bench {

template <EventBackend Inner>
class CountingBackend : public Inner {
 public:
  using typename Inner::event_type;
  using typename Inner::handle_type;

  explicit CountingBackend(Inner inner = Inner())
      : Inner(std::move(inner)), created_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

  handle_type create(unsigned flags, int device) {
    handle_type handle = Inner::create(flags, device);
    // Relaxed: a statistic, read after the benchmark threads have stopped.
    created_->fetch_add(1, std::memory_order_relaxed);
    return handle;
  }

  std::uint64_t created() const noexcept { return created_->load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<std::atomic<std::uint64_t>> created_;
};

}  // namespace evpool::bench
