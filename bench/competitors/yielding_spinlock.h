// evpool competitor: the lock of the design being replaced. Private; benchmarks and tests only.
//
// A test-and-set flag that spins `SpinsBeforeYield` times and then yields on every further failed
// attempt, as DALI's dali::spinlock (yielding_spinlock<100>) does.
#pragma once

#include <atomic>
#include <thread>

namespace evpool::competitors {

template <int SpinsBeforeYield>
class YieldingSpinlock {
 public:
  void lock() noexcept {
    int spins = SpinsBeforeYield;
    // Acquire: the critical section must see what the previous holder wrote before unlock.
    while (flag_.test_and_set(std::memory_order_acquire)) {
      if (spins > 0)
        --spins;
      else
        std::this_thread::yield();
    }
  }

  // Release: publishes the critical section's writes to the next holder.
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

}  // namespace evpool::competitors
