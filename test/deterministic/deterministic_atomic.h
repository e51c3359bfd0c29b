// An atomic that yields to the DeterministicScheduler before every operation, for the
// `Policy::atomic` seam of evpool's core (see evpool/pool_policy.h). Each operation is then
// performed on a real std::atomic with the caller's memory orders.
#pragma once

#include <atomic>

#include "deterministic_scheduler.h"

namespace evpool::testing_support {

template <class T>
class DeterministicAtomic {
 public:
  static constexpr bool is_always_lock_free = std::atomic<T>::is_always_lock_free;

  DeterministicAtomic() noexcept : value_() {}
  constexpr DeterministicAtomic(T value) noexcept : value_(value) {}  // NOLINT: mirrors std::atomic
  DeterministicAtomic(const DeterministicAtomic &) = delete;
  DeterministicAtomic &operator=(const DeterministicAtomic &) = delete;

  T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    DeterministicScheduler::yield_point();
    return value_.load(order);
  }
  void store(T value, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicScheduler::yield_point();
    value_.store(value, order);
  }
  T exchange(T value, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicScheduler::yield_point();
    return value_.exchange(value, order);
  }
  bool compare_exchange_weak(T &expected, T desired, std::memory_order success, std::memory_order failure) noexcept {
    DeterministicScheduler::yield_point();
    // Strong underneath: a spurious failure would make schedules irreproducible.
    return value_.compare_exchange_strong(expected, desired, success, failure);
  }
  bool compare_exchange_strong(T &expected, T desired, std::memory_order success, std::memory_order failure) noexcept {
    DeterministicScheduler::yield_point();
    return value_.compare_exchange_strong(expected, desired, success, failure);
  }
  T fetch_add(T delta, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicScheduler::yield_point();
    return value_.fetch_add(delta, order);
  }
  T fetch_sub(T delta, std::memory_order order = std::memory_order_seq_cst) noexcept {
    DeterministicScheduler::yield_point();
    return value_.fetch_sub(delta, order);
  }

 private:
  std::atomic<T> value_;
};

}  // namespace evpool::testing_support
