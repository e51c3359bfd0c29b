// evpool: how a completion queue's poller waits: between passes, and when it has nothing to do.
// Private to the library.
//
// Design rationale
// ----------------
// A poller that queries without pause burns a core; one that sleeps a fixed time adds that time
// to every completion. Work on a GPU ends microseconds after it is enqueued, or milliseconds, so
// the poller adapts to what it sees:
//
//   progress (a pass finished a request, or found new ones)    -> poll again at once
//   no progress for less than `spin_for`                       -> poll again at once (spinning)
//   no progress for longer                                     -> sleep 1 us, 2 us, 4 us, ... up
//                                                                  to `max_sleep`, then sleep that
//   nothing in progress at all                                 -> sleep until a request arrives
//
// So a completion that takes t is seen at most about t late once the spin is over (each sleep is
// no longer than the time already waited, until `max_sleep`), and an idle queue makes no call at
// all: its poller sleeps in the kernel until the doorbell rings.
//
// The doorbell is one word, `sleeping`, the poller's intent to sleep. A requester pushes its
// request, then reads the word; the poller stores the word, then looks at every channel once more
// before it sleeps. Both sides are sequentially consistent, so at least one of them sees the
// other (the store-load pattern of Dekker's algorithm): the requester sees the poller about to
// sleep and wakes it, or the poller sees the request and does not sleep. A requester reads the
// word from a line that stays shared while the poller is awake, so the doorbell costs a busy
// queue one load per request; only a request that finds the poller asleep writes the line and
// enters the kernel (FUTEX_WAKE), and only the first of those since the poller slept.
//
// The atomic type is a parameter, so that a test can run the two halves over atomics that model
// store buffers (test/poller_wait_test.cc): there, a sleep announcement weaker than seq_cst lets
// both sides miss each other, as the hardware would.
//
// Timed sleeps use the futex too, so a request also ends a backoff sleep. The poller thread sets
// its timer slack to 1 us (PR_SET_TIMERSLACK): Linux's default of 50 us would stretch every short
// sleep to 50 us.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace evpool::detail {

template <template <class> class Atomic = std::atomic>
class BasicPollerDoorbell {
 public:
  /// The requester's half: called after a push. Returns whether it woke the poller. Thread-safe,
  /// wait-free but for the wake.
  bool ring() noexcept {
    // seq_cst: ordered after the push (request_channel.h), see the top.
    return sleeping_.load(std::memory_order_seq_cst) != 0 && wake();
  }

  /// Wakes the poller whether or not a request came (the queue is stopping). Returns whether the
  /// poller had announced a sleep that no other wake() answered.
  bool wake() noexcept {
    if (sleeping_.exchange(0, std::memory_order_seq_cst) == 0) return false;
    futex(FUTEX_WAKE_PRIVATE, 1, nullptr);
    return true;
  }

  /// The poller's half, step 1: after this, it must look at every channel before sleep().
  void announce_sleep() noexcept { sleeping_.store(1, std::memory_order_seq_cst); }
  /// The poller found work after announce_sleep(): it will not sleep.
  void cancel_sleep() noexcept { sleeping_.store(0, std::memory_order_relaxed); }

  /// Sleeps until wake(), or `timeout` (none: no limit), or a spurious wakeup. Only the poller.
  void sleep(std::optional<std::chrono::nanoseconds> timeout) noexcept {
    timespec limit{};
    if (timeout) {
      limit.tv_sec = static_cast<time_t>(timeout->count() / 1'000'000'000);
      limit.tv_nsec = static_cast<long>(timeout->count() % 1'000'000'000);
    }
    // The kernel sleeps only while the word is still 1: a wake() in between makes it return.
    futex(FUTEX_WAIT_PRIVATE, 1, timeout ? &limit : nullptr);
    sleeping_.store(0, std::memory_order_relaxed);
  }

  /// A fork() child's poller starts afresh.
  void reset() noexcept { sleeping_.store(0, std::memory_order_relaxed); }

 private:
  long futex(int operation, std::uint32_t value, const timespec *timeout) noexcept {
    static_assert(sizeof(Atomic<std::uint32_t>) == sizeof(std::uint32_t), "the futex is the word itself");
    return syscall(SYS_futex, reinterpret_cast<std::uint32_t *>(&sleeping_), operation, value, timeout, nullptr, 0);
  }

  Atomic<std::uint32_t> sleeping_{0};
};

using PollerDoorbell = BasicPollerDoorbell<>;

/// The poller's pacing between passes that make no progress (see the top).
class AdaptiveWait {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::nanoseconds kFirstSleep = std::chrono::microseconds(1);

  AdaptiveWait(std::chrono::nanoseconds spin_for, std::chrono::nanoseconds max_sleep) noexcept
      : spin_for_(spin_for), max_sleep_(std::max(max_sleep, kFirstSleep)) {}

  /// A pass made progress.
  void progressed() noexcept { idle_since_ = kNotIdle; }

  /// After a pass without progress: nothing if the poller should still spin, else how long to
  /// sleep before the next pass.
  std::optional<std::chrono::nanoseconds> after_idle_pass() noexcept {
    const clock::time_point now = clock::now();
    if (idle_since_ == kNotIdle) {
      idle_since_ = now;
      next_sleep_ = kFirstSleep;
    }
    if (now - idle_since_ < spin_for_) return std::nullopt;
    const std::chrono::nanoseconds sleep = next_sleep_;
    next_sleep_ = std::min(next_sleep_ * 2, max_sleep_);
    return sleep;
  }

 private:
  const std::chrono::nanoseconds spin_for_;
  const std::chrono::nanoseconds max_sleep_;
  // When the passes without progress began; kNotIdle after progress. A sentinel rather than a
  // std::optional: GCC 12 at -O2 and above warns that an optional's value "may be used
  // uninitialized" here (-Wmaybe-uninitialized, a false positive), which fails a release build
  // with -Dwerror=true. steady_clock::now() never returns its minimum, which lies before any
  // clock the kernel keeps.
  static constexpr clock::time_point kNotIdle = clock::time_point::min();
  clock::time_point idle_since_ = kNotIdle;
  std::chrono::nanoseconds next_sleep_ = kFirstSleep;
};

}  // namespace evpool::detail
