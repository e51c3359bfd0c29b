// evpool tests: CountingStack, a scheduler stack (examples/scheduler/stack.h) that counts what the
// executor asks of the stack under it: leases begun and ended, events got and handed back,
// completions asked for and called back. Once a run is over, each pair must balance, whatever
// the stack: the executor leaks nothing, and every callback runs once. Works over any stack, so
// the same check runs on the simulated GPU and on the five CUDA stacks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

#include "scheduler/dag.h"
#include "scheduler/stack.h"

namespace evpool::test {

template <example::SchedulerStack Inner>
class CountingStack {
 public:
  // Relaxed, all: read once the run is over, which orders every count before (executor.h: the
  // workers are joined, and each callback counts before it calls the executor's).
  struct Counts {
    std::atomic<std::uint64_t> leases{0}, leases_ended{0};
    std::atomic<std::uint64_t> events{0}, events_back{0};
    std::atomic<std::uint64_t> notifies{0}, callbacks{0};
  };

  using event_type = typename Inner::event_type;
  using status_type = typename Inner::status_type;

  class stream_lease {
   public:
    stream_lease(Inner &inner, example::TaskId task, Counts &counts)
        : inner_(inner.lease_stream(task)), counts_(counts) {
      counts_.leases.fetch_add(1, std::memory_order_relaxed);
    }
    stream_lease(const stream_lease &) = delete;
    stream_lease &operator=(const stream_lease &) = delete;
    ~stream_lease() { counts_.leases_ended.fetch_add(1, std::memory_order_relaxed); }

    const typename Inner::stream_lease &inner() const noexcept { return inner_; }

   private:
    typename Inner::stream_lease inner_;
    Counts &counts_;
  };

  explicit CountingStack(Inner &inner) noexcept : inner_(inner) {}

  static bool succeeded(const status_type &status) noexcept { return Inner::succeeded(status); }
  static auto describe(const status_type &status) { return Inner::describe(status); }

  stream_lease lease_stream(example::TaskId task) { return stream_lease(inner_, task, counts_); }
  void wait(const stream_lease &stream, const event_type &event) { inner_.wait(stream.inner(), event); }
  /// Only where the inner stack plans its streams (stack.h).
  bool follows_at_enqueue(example::TaskId task, example::TaskId successor) const noexcept requires
      requires(const Inner &inner, example::TaskId id) {
    inner.follows_at_enqueue(id, id);
  }
  { return inner_.follows_at_enqueue(task, successor); }
  void launch(const stream_lease &stream, example::TaskId task, std::chrono::nanoseconds duration) {
    inner_.launch(stream.inner(), task, duration);
  }
  event_type get_event(example::TaskId task) {
    event_type event = inner_.get_event(task);
    // An empty event (a stack that needs none, as TensorFlow's one stream) is never handed back.
    if (event) counts_.events.fetch_add(1, std::memory_order_relaxed);
    return event;
  }
  void record(event_type &event, const stream_lease &stream) { inner_.record(event, stream.inner()); }
  void put_event(event_type &&event) noexcept {
    if (event) counts_.events_back.fetch_add(1, std::memory_order_relaxed);
    inner_.put_event(std::move(event));
  }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    inner_.notify(stream.inner(), [this, done = std::forward<F>(done)](const status_type &status) mutable noexcept {
      counts_.callbacks.fetch_add(1, std::memory_order_relaxed);
      done(status);
    });
    counts_.notifies.fetch_add(1, std::memory_order_relaxed);  // only once it returned: a throw asked nothing
  }
  void finish() { inner_.finish(); }

  const Counts &counts() const noexcept { return counts_; }

 private:
  Inner &inner_;
  Counts counts_;
};

}  // namespace evpool::test
