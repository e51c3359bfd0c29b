// evpool: one request for a completion, shared between its handle and its queue. Private to the
// library.
//
// Design rationale
// ----------------
// A request is born when a thread asks to hear about the work on a stream, and lives until both
// its queue has run its callback and its handle (Completion) is gone: two references, counted in
// `references`, the last one frees it. The callback is stored inline, in a class derived for its
// type (`CallbackRequest<F>`), so a request costs one allocation and no separate type erasure.
//
// `state` tells a handle whether the request is done, and whether a thread sleeps waiting for it:
//
//    31                                2   1         0
//   +-----------------------------------+---------+------+
//   |                 0                 | waiter  | done |
//   +-----------------------------------+---------+------+
//
// The queue finishes a request with one fetch_or of `done` (release: the status, the callback's
// exception and the event's return to its pool, all written before, are visible to a handle that
// sees `done`), and calls into the kernel only if a waiter set its bit: a request nobody waits
// for costs its queue no system call. The waiter sets its bit with a compare-exchange, so that
// either the queue's fetch_or sees it, or the waiter's exchange sees `done` and does not sleep.
//
// `next` links the request first into its thread's channel (request_channel.h), then, once the
// poller has taken it from there, into its stream's FIFO; only the poller touches it then.
//
// `queue` names the queue that made the request (its id), so that a handle's wait() can tell when
// its thread is inside a pass of that very queue, where the request cannot complete
// (polling_thread.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <new>
#include <utility>

#include "evpool/completion_backend.h"
#include "evpool/detail/backoff.h"
#include "evpool/detail/signal_probes.h"
#include "evpool/detail/signal_slots.h"

namespace evpool::detail {

template <class Backend>
class CompletionRequest {
 public:
  using stream_type = typename Backend::stream_type;
  using status_type = typename Backend::status_type;
  using event_type = typename Backend::event_type;

  static constexpr std::uint32_t kDone = 1;
  static constexpr std::uint32_t kWaiter = 2;

  explicit CompletionRequest(stream_type stream) noexcept : stream_(stream) {}
  CompletionRequest(const CompletionRequest &) = delete;
  CompletionRequest &operator=(const CompletionRequest &) = delete;

  /// Runs the callback with the request's status, then destroys it (what it captured). Returns
  /// what the callback threw, or, if it returned, what destroying its captures threw; null if
  /// neither threw. Called once, by the queue's poller, before the queue lets go of its reference.
  virtual std::exception_ptr run_callback() noexcept = 0;

  /// Drops one reference; the last one frees the request. Thread-safe, wait-free.
  void release() noexcept {
    // acq_rel: the last owner's delete must see every write the other owner made before its
    // release (the queue's status and exception, or nothing from a handle).
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  bool done() const noexcept {
    // Acquire: pairs with finish()'s release, so the status and exception are visible.
    return (state_.load(std::memory_order_acquire) & kDone) != 0;
  }

  /// Blocks until done(): spins a little (a completion is often microseconds away), then sleeps
  /// in the kernel until finish() wakes it.
  void wait() const noexcept {
    for (int i = 0; i < kSpinsBeforeSleep; ++i) {
      if (done()) return;
      cpu_relax();
    }
    std::uint32_t seen = state_.load(std::memory_order_acquire);
    while ((seen & kDone) == 0) {
      // Acquire on success and failure: a `done` seen here must publish the status too.
      if ((seen & kWaiter) != 0 || state_.compare_exchange_weak(seen, seen | kWaiter, std::memory_order_acquire)) {
        state_.wait(seen | kWaiter, std::memory_order_acquire);
        seen = state_.load(std::memory_order_acquire);
      }
    }
  }

  /// Marks the request done (the callback has run and the event is back in its pool) and wakes a
  /// waiter if there is one. Called once, by the poller, after status() and exception are set.
  void finish() noexcept {
    // Release: publishes the status, the exception and the event's return (see the top).
    if ((state_.fetch_or(kDone, std::memory_order_release) & kWaiter) != 0) state_.notify_all();
  }

  stream_type stream() const noexcept { return stream_; }
  int device() const noexcept { return recorded_on.device; }
  event_type &event() noexcept { return event_; }

  /// Where the backend recorded the event. Written by the requester before the push.
  RecordedOn recorded_on;
  /// The id of the queue that made the request. Written by the requester before the handle exists.
  std::uint64_t queue = 0;
  /// The CUDA status the work ended with. Written by the poller before finish(); read after done().
  status_type status{};
  /// Set when record() failed: the request completes with this status without a query.
  bool failed_to_record = false;
  /// The request's completion signal (signal_slots.h), if its record enqueued one: `signal.word`
  /// is then set, and the request is done once the word holds `signal.value` or more. The slot,
  /// taken from `signal_block` (null: none taken), goes back to it when the request is finished.
  /// Written by the requester before the push.
  SignalSlot signal;
  SignalSlots *signal_block = nullptr;
  unsigned signal_slot = 0;
  /// Poller-private: when the event of a request whose signal has not landed may be queried
  /// (signal_probes.h).
  ProbeMarks probe;
  /// What the callback threw, if it threw.
  std::exception_ptr callback_exception;
  /// The channel's link, then the stream FIFO's (see the top).
  CompletionRequest *next = nullptr;

 protected:
  virtual ~CompletionRequest() = default;

 private:
  static constexpr int kSpinsBeforeSleep = 2048;

  const stream_type stream_;
  event_type event_;
  mutable std::atomic<std::uint32_t> state_{0};
  std::atomic<std::uint32_t> references_{2};  // the queue's and the handle's
};

/// A request whose callback is an `F` called with the status.
template <class Backend, class F>
class CallbackRequest final : public CompletionRequest<Backend> {
 public:
  template <class G>
  CallbackRequest(typename Backend::stream_type stream, G &&callback)
      : CompletionRequest<Backend>(stream), callback_(std::forward<G>(callback)) {}

  /// Calls the callback, then destroys it (also if it threw): what it captured is let go of on
  /// the polling thread, when the request is done, not when the last handle goes. Destroyed here,
  /// outside any noexcept destructor, and caught like the call: a capture whose destructor throws
  /// (one declared noexcept(false) that calls evpool::wait, say) reaches the handle as the
  /// callback's exception would, instead of ending the process. If both throw, the call's is
  /// kept: it came first, and the destructor may only have failed because of it.
  std::exception_ptr run_callback() noexcept override {
    std::exception_ptr thrown;
    try {
      callback_(std::as_const(this->status));
    } catch (...) {
      thrown = std::current_exception();
    }
    try {
      callback_.~F();
    } catch (...) {
      if (thrown == nullptr) thrown = std::current_exception();
    }
    return thrown;
  }

  // The callback is already destroyed: run_callback() runs before the queue's reference goes, so
  // before the last (and a fork() child's forgotten requests are never freed).
  ~CallbackRequest() noexcept override {}

 private:
  // In a union, so that no destructor of the request destroys it (see run_callback()).
  union {
    F callback_;
  };
};

/// A request without a callback: only its handle hears about it.
template <class Backend>
class SilentRequest final : public CompletionRequest<Backend> {
 public:
  using CompletionRequest<Backend>::CompletionRequest;
  std::exception_ptr run_callback() noexcept override { return nullptr; }
};

}  // namespace evpool::detail
