// evpool: a thread's channel of completion requests to one queue. Private to the library.
//
// Design rationale
// ----------------
// Asking for a completion must scale as Get and Put do, so no two requesting threads may write
// one cache line. Each thread that asks a queue gets a channel of its own: a Treiber stack whose
// only pusher is that thread and whose only popper is the queue's poller, which takes the whole
// stack at once (an exchange with null) and reverses it into the order of the requests. The
// thread pushes with a compare-exchange on a line that only the poller also touches, once per
// pass: a per-thread batch of requests, collected by the poller. The push is correct for any
// number of pushers, so the queue's shared channel, for threads that cannot have their own (see
// basic_completion_queue.h), is the same type.
//
// A thread finds its channel through its directory of caches (thread_cache_directory.h), under
// the queue's id, as it finds its event cache under a pool's: the same hints, the same exit hook,
// the same fork handling. So the channel is a ThreadCacheLink, owned by two parties, each
// holding one bit of `owners`:
//
//   kThread  the thread's directory: dropped when the thread exits, or when it finds the channel
//            stale (its queue was destroyed);
//   kQueue   the queue: dropped when the queue is destroyed, or when its poller finds the
//            channel empty and its thread gone.
//
// Whoever drops the last bit deletes the channel. After dropping kThread the thread never
// pushes here again (its directory is torn down, or no longer lists the channel), so a channel
// that the poller finds without kThread and empty stays empty.
//
// The head's atomic type is a parameter, so that a test can run the push over atomics that model
// store buffers, against the doorbell (test/poller_wait_test.cc).
#pragma once

#include <atomic>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/thread_cache_directory.h"

namespace evpool::detail {

class SignalSlots;

template <class Request, template <class> class Atomic = std::atomic>
class RequestChannel final : public ThreadCacheLink {
 public:
  static constexpr std::uint32_t kThread = 1;
  static constexpr std::uint32_t kQueue = 2;

  explicit RequestChannel(std::uint32_t owners) noexcept : owners_(owners) {}

  /// Publishes `request` to the poller. Thread-safe, lock-free (wait-free for the channel's own
  /// thread but for a race with the poller's take_all, which the retry loses at most once a pass).
  void push(Request *request) noexcept {
    Request *top = head_.value.load(std::memory_order_relaxed);
    do {
      request->next = top;
      // seq_cst: publishes the request (release), and orders this push before the pusher's
      // load of the poller's sleeping flag (poller_wait.h, the doorbell): a store-load
      // pairing that only sequential consistency gives.
    } while (!head_.value.compare_exchange_weak(top, request, std::memory_order_seq_cst, std::memory_order_relaxed));
  }

  /// Every request pushed so far, oldest first. Only the poller calls it.
  Request *take_all() noexcept {
    // A load first: most passes find most channels empty, and a load leaves the line shared.
    if (head_.value.load(std::memory_order_relaxed) == nullptr) return nullptr;
    // Acquire: pairs with push's release, so the requests' fields are visible.
    Request *newest = head_.value.exchange(nullptr, std::memory_order_acquire);
    Request *oldest = nullptr;
    while (newest != nullptr) {
      Request *older = newest->next;
      newest->next = oldest;
      oldest = newest;
      newest = older;
    }
    return oldest;
  }

  /// Whether a request waits here. seq_cst: the poller's half of the sleeping protocol.
  bool has_requests() const noexcept { return head_.value.load(std::memory_order_seq_cst) != nullptr; }

  /// Whether the thread let go of the channel (it will not push again).
  bool thread_gone() const noexcept {
    // Acquire: the thread's last pushes happen before its release of kThread.
    return (owners_.load(std::memory_order_acquire) & kThread) == 0;
  }

  /// Drops `owner`'s bit; deletes the channel if it was the last.
  void let_go(std::uint32_t owner) noexcept {
    // acq_rel: the deleting party must see the other's last writes (its pushes, or the poller's).
    if (owners_.fetch_and(~owner, std::memory_order_acq_rel) == owner) delete this;
  }

  // ThreadCacheLink: the owning thread's directory.
  void on_thread_exit() noexcept override { let_go(kThread); }
  bool stale() const noexcept override {
    // Acquire: pairs with the queue's release of kQueue; nothing is read after, but a stale
    // channel is deleted by the thread, after everything the queue did to it.
    return (owners_.load(std::memory_order_acquire) & kQueue) == 0;
  }
  void drop() noexcept override { let_go(kThread); }

  /// The queue's list of its channels (poller-private but for the pushes at its head).
  RequestChannel *next_channel = nullptr;
  /// Requests taken from this channel and not finished yet (poller-private).
  std::uint64_t in_progress = 0;
  /// Requests taken that could not be filed for want of memory, oldest first (poller-private).
  Request *unplaced = nullptr;
  /// The thread's completion-signal slots (signal_slots.h), or null: set by the thread before the
  /// channel is published, given back to the queue's pool by the poller when it lets go of the
  /// channel. The shared channel has none.
  SignalSlots *signals = nullptr;

 private:
  ~RequestChannel() = default;

  CacheLinePadded<Atomic<Request *>> head_{nullptr};
  std::atomic<std::uint32_t> owners_;
};

}  // namespace evpool::detail
