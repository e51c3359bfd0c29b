// evpool: which completion queues the calling thread is polling now. Private to the library.
//
// Design rationale
// ----------------
// A queue's request completes only in one of that queue's polling passes, and one thread at a
// time makes them. So a thread inside a pass (running one of the queue's callbacks, or a poll()
// of another queue that such a callback made) that waits for an unfinished request of that queue
// waits for itself, for ever, without a word. Each pass links a frame naming its queue into the
// thread's list for as long as it runs, and Completion::wait() looks for the request's queue
// there before it blocks, to throw std::logic_error instead. A request of another queue is found
// in no frame of this thread, and waiting for it is fine.
//
// The frame also carries the queue's destruction when a callback destroys its own queue: the pass
// cannot end while the destructor waits for it, so the destructor marks the frame and returns,
// and the pass, seeing the mark once it is over, finishes the destruction itself
// (basic_completion_queue.h). The mark is written and read by the one thread: nothing is shared.
//
// The frames live on the passes' own stacks: a pass costs two thread-local writes and no
// allocation, and the walk is as long as the passes nested on the thread (one, nearly always).
// The list is constant-initialised and trivially destructible, so reaching it costs no guard; it
// has default visibility, so that most shared objects bind to one copy (thread_cache_directory.h
// says why not all may). One that binds to another copy only misses the check.
#pragma once

#include <cstdint>

#include "evpool/export.h"

namespace evpool::detail {

struct PollingFrame {
  std::uint64_t queue;
  PollingFrame *outer;
  bool queue_destroyed = false;  // the queue's destructor ran inside the pass, which finishes it
};

/// The innermost pass the calling thread is making; null outside any.
EVPOOL_API inline constinit thread_local PollingFrame *this_thread_polling = nullptr;

/// Marks the calling thread as polling `queue` (a queue's id) for the object's lifetime.
class PollingHere {
 public:
  explicit PollingHere(std::uint64_t queue) noexcept : frame_{queue, this_thread_polling} {
    this_thread_polling = &frame_;
  }
  PollingHere(const PollingHere &) = delete;
  PollingHere &operator=(const PollingHere &) = delete;
  ~PollingHere() { this_thread_polling = frame_.outer; }

  /// Whether the queue was destroyed inside this pass (hand_destruction_to_pass()).
  bool queue_destroyed() const noexcept { return frame_.queue_destroyed; }

 private:
  PollingFrame frame_;
};

/// Whether the calling thread is inside a pass of `queue`.
inline bool polling_here(std::uint64_t queue) noexcept {
  for (const PollingFrame *frame = this_thread_polling; frame != nullptr; frame = frame->outer)
    if (frame->queue == queue) return true;
  return false;
}

/// If the calling thread is inside a pass of `queue`, marks that pass as the one that finishes
/// the queue's destruction (its destructor ran in one of the pass's callbacks) and returns true.
/// A thread makes at most one pass of a queue at a time (a nested poll() finds `polling_` taken).
inline bool hand_destruction_to_pass(std::uint64_t queue) noexcept {
  for (PollingFrame *frame = this_thread_polling; frame != nullptr; frame = frame->outer) {
    if (frame->queue == queue) {
      frame->queue_destroyed = true;
      return true;
    }
  }
  return false;
}

}  // namespace evpool::detail
