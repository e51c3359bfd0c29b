// evpool test support: a tagged index stack that counts the calls made to it, so that a test can
// tell which stripe of a depot a give, a take or a delete_all reached. Stacks are numbered in the
// order they are built, from the last restart_stack_numbering(). A depot builds its stripes'
// stacks in order; in SpareBlockDepot stripe s holds stack 2s (its bundles) and 2s + 1 (its empty
// nodes). Private; tests only.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "evpool/detail/node_arena.h"
#include "evpool/detail/tagged_index_stack.h"

namespace evpool::test {

struct StackCalls {
  std::atomic<int> pushes{0};  ///< push and push_chain
  std::atomic<int> pops{0};    ///< pop, whether it found a node or not
  std::atomic<int> pops_found{0};
};

inline constexpr std::size_t kMostRecordedStacks = 64;
inline std::array<StackCalls, kMostRecordedStacks> recorded_stack_calls;
inline std::atomic<std::size_t> next_recorded_stack{0};

/// Numbers the next stack built 0 and clears every count. Call before building the depot.
inline void restart_stack_numbering() noexcept {
  next_recorded_stack.store(0, std::memory_order_relaxed);
  for (StackCalls &calls : recorded_stack_calls) {
    calls.pushes.store(0, std::memory_order_relaxed);
    calls.pops.store(0, std::memory_order_relaxed);
    calls.pops_found.store(0, std::memory_order_relaxed);
  }
}

/// The calls made to stack `number` since the restart.
inline const StackCalls &stack_calls(std::size_t number) noexcept { return recorded_stack_calls.at(number); }

class RecordedStack {
 public:
  RecordedStack()
      : calls_(recorded_stack_calls.at(next_recorded_stack.fetch_add(1, std::memory_order_relaxed))) {}

  template <class Nodes>
  void push(std::uint32_t index, Nodes &nodes) noexcept {
    calls_.pushes.fetch_add(1, std::memory_order_relaxed);
    stack_.push(index, nodes);
  }
  template <class Nodes>
  void push_chain(std::uint32_t first, std::uint32_t last, Nodes &nodes) noexcept {
    calls_.pushes.fetch_add(1, std::memory_order_relaxed);
    stack_.push_chain(first, last, nodes);
  }
  template <class Nodes>
  std::uint32_t pop(Nodes &nodes) noexcept {
    calls_.pops.fetch_add(1, std::memory_order_relaxed);
    const std::uint32_t index = stack_.pop(nodes);
    if (index != detail::kNilIndex) calls_.pops_found.fetch_add(1, std::memory_order_relaxed);
    return index;
  }
  std::uint32_t pop_all() noexcept { return stack_.pop_all(); }

 private:
  StackCalls &calls_;
  detail::TaggedIndexStack<std::atomic> stack_;
};

}  // namespace evpool::test
