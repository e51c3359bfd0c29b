// evpool bench: a bounded single-producer single-consumer ring that carries raw event handles from
// a thread that got them to the thread that puts them back (the "handoff" workload).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "evpool/detail/cache_line_padded.h"

namespace evpool::bench {

template <class Handle, std::size_t Capacity = 64>
class HandoffRing {
  static_assert((Capacity & (Capacity - 1)) == 0, "Capacity must be a power of two");

 public:
  /// Producer only. Spins (yielding) while the ring is full.
  void push(Handle handle) noexcept {
    const std::uint64_t tail = tail_.value.load(std::memory_order_relaxed);
    // Acquire: the consumer's read of the slot we are about to overwrite happened before.
    while (tail - head_.value.load(std::memory_order_acquire) == Capacity) std::this_thread::yield();
    slots_[tail % Capacity] = handle;
    // Release: publishes the slot to the consumer.
    tail_.value.store(tail + 1, std::memory_order_release);
  }

  /// Consumer only. Spins (yielding) while the ring is empty.
  Handle pop() noexcept {
    const std::uint64_t head = head_.value.load(std::memory_order_relaxed);
    // Acquire: pairs with push's release, so the slot's contents are visible.
    while (tail_.value.load(std::memory_order_acquire) == head) std::this_thread::yield();
    const Handle handle = slots_[head % Capacity];
    // Release: the slot may be overwritten once this store is seen.
    head_.value.store(head + 1, std::memory_order_release);
    return handle;
  }

 private:
  detail::CacheLinePadded<std::atomic<std::uint64_t>> head_{{0}};
  detail::CacheLinePadded<std::atomic<std::uint64_t>> tail_{{0}};
  Handle slots_[Capacity] = {};
};

}  // namespace evpool::bench
