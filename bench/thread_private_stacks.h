// evpool bench: thread-private stacks of idle events, one per thread and device, shared with no
// one. Not a pool (an event put on one thread can never be got on another), but the limit that no
// shared design can beat: what the same work costs with no synchronisation at all.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/event_backend.h"

namespace evpool::bench {

template <EventBackend Backend>
class ThreadPrivateStacks {
 public:
  using event_type = typename Backend::event_type;

  ThreadPrivateStacks(Backend backend, unsigned event_flags, int threads)
      : backend_(std::move(backend)), event_flags_(event_flags),
        per_thread_(static_cast<std::size_t>(threads)) {
    for (auto &slot : per_thread_) slot.stacks.resize(static_cast<std::size_t>(backend_.device_count()));
  }
  ThreadPrivateStacks(const ThreadPrivateStacks &) = delete;
  ThreadPrivateStacks &operator=(const ThreadPrivateStacks &) = delete;
  ~ThreadPrivateStacks() {
    for (auto &slot : per_thread_)
      for (auto &stack : slot.stacks)
        for (auto handle : stack) backend_.destroy(handle);
  }

  event_type Get(int thread, int device) {
    auto &stack = per_thread_[static_cast<std::size_t>(thread)].stacks[static_cast<std::size_t>(device)];
    if (stack.empty()) return backend_.adopt(backend_.create(event_flags_, device), device);
    const auto handle = stack.back();
    stack.pop_back();
    return backend_.adopt(handle, device);
  }

  void Put(int thread, event_type &&event, int device) {
    per_thread_[static_cast<std::size_t>(thread)].stacks[static_cast<std::size_t>(device)].push_back(
        event.release());
  }

 private:
  // Each thread's stacks start on their own 128 bytes, so threads share no cache line.
  struct alignas(detail::kFalseSharingRange) Slot {
    std::vector<std::vector<typename Backend::handle_type>> stacks;
  };

  Backend backend_;
  unsigned event_flags_;
  std::vector<Slot> per_thread_;
};

}  // namespace evpool::bench
