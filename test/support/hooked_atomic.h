// evpool test support: a pool policy whose atomics run a hook at the first load of a 64-bit word
// once armed, so that a test can act at a chosen point inside a pool operation (another thread
// exits, or takes an event) where no backend call would give it a handle. Inside Purge, Trim and
// stats() the first such load comes after every cache has been requested (the handshake's words
// are 32-bit): reading a depot's idle count or detaching its filled stack. Private; tests only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "evpool/pool_policy.h"

namespace evpool::testing_support {

/// Runs once, at the next load of a HookedAtomic<std::uint64_t>, on the loading thread; disarmed
/// before it runs, so the hook's own loads do not run it again.
inline std::function<void()> at_next_wide_load;

template <class T>
struct HookedAtomic : std::atomic<T> {
  using std::atomic<T>::atomic;
  T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    if constexpr (std::is_same_v<T, std::uint64_t>) {
      if (at_next_wide_load) std::exchange(at_next_wide_load, nullptr)();
    }
    return std::atomic<T>::load(order);
  }
};

/// The default policy, on HookedAtomic.
struct HookedAtomicPolicy : DefaultPoolPolicy {
  template <class T>
  using atomic = HookedAtomic<T>;
};

}  // namespace evpool::testing_support
