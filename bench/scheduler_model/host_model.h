// evpool scheduler model: the host, its cores, the locks its threads meet, and how they sleep.
//
// Design rationale
// ----------------
// What a host thread of the scheduler spends time on, reduced to what ranks designs:
// - Cores. A thread runs only on a core; the H100 host has 16. A thread that sleeps (a futex: an
//   idle worker, a poller between passes) gives its core up and needs one again when woken, after
//   the kernel's wake-up latency. A thread that spins (a waiter inside cudaEventSynchronize, which
//   spins under CUDA's default scheduling flags) keeps its core; a woken thread that finds every
//   core taken preempts a spinner, as Linux's scheduler favours a thread that slept over one that
//   has been running, and the spinner queues for a core again. Threads that wait for a lock keep
//   their cores (the driver's and the pools' locks spin first).
// - Locks, FIFO: a holder keeps the lock for its hold time; a thread that had to queue pays a
//   hand-over cost on top (the lock's line moving, a yield or a futex), which is why sixteen
//   threads get less through a lock than one thread does (bench/results/h200/tables.md,
//   cuda/sync: 2.89 M record+wait pairs a second on one thread, 1.36 M on sixteen).
// - The driver: one lock that every call touching the device's submission path takes
//   (DriverLock is a Lock with the calls' costs; calibration.h has them).
// Everything else a thread does is CPU time at a fixed cost, awaited as a Delay.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "scheduler_model/virtual_time.h"

namespace evpool::model {

struct HostThread {
  std::uint32_t id = 0;
  bool on_core = false;
  bool spinning = false;           // on a core but preemptible, waiting for a Signal
  bool signalled = false;          // its Signal fired while it was off its core
  std::coroutine_handle<> parked;  // what to resume once it has a core (or its signal)
  Time core_since = 0;
  Time core_time = 0;  // total time on a core: the "cores used" figure
};

/// The host's cores. See the top for the policy.
class Cores {
 public:
  Cores(EventLoop &loop, int cores) : loop_(loop), free_(cores) {}

  /// Awaitable: the thread has a core when it resumes.
  struct Acquire {
    Cores &cores;
    HostThread &thread;
    bool await_ready() const noexcept { return thread.on_core || cores.try_take(thread); }
    void await_suspend(std::coroutine_handle<> awaiter) {
      thread.parked = awaiter;
      cores.waiting_.push_back(&thread);
    }
    void await_resume() const noexcept {}
  };
  Acquire acquire(HostThread &thread) { return {*this, thread}; }

  /// The thread gives its core up (it sleeps or ends).
  void release(HostThread &thread) {
    if (!thread.on_core) return;
    thread.on_core = false;
    thread.core_time += loop_.now() - thread.core_since;
    hand_over();
  }

  /// The thread spins on its core until `fire` is called for it (Signal); preemptible meanwhile.
  void start_spinning(HostThread &thread, std::coroutine_handle<> awaiter) {
    thread.spinning = true;
    thread.signalled = false;
    thread.parked = awaiter;
    spinners_.push_back(&thread);
  }
  /// The spinner's condition came true: it goes on at once if it still has its core, else when it
  /// gets one back.
  void fire(HostThread &thread) {
    if (!thread.spinning) return;
    if (thread.on_core) {
      stop_spinning(thread);
      loop_.resume_at(loop_.now(), thread.parked);
    } else {
      thread.signalled = true;
    }
  }

  /// Ends the accounting of every thread still on a core (the run is over).
  void settle(std::vector<HostThread *> threads) {
    for (HostThread *thread : threads)
      if (thread->on_core) {
        thread->core_time += loop_.now() - thread->core_since;
        thread->core_since = loop_.now();
      }
  }

 private:
  bool try_take(HostThread &thread) {
    if (free_ > 0) {
      --free_;
    } else if (!spinners_.empty()) {
      HostThread *victim = oldest_spinner_on_core();
      if (victim == nullptr) return false;
      victim->on_core = false;
      victim->core_time += loop_.now() - victim->core_since;
      waiting_.push_back(victim);  // it spins again once it has a core
    } else {
      return false;
    }
    thread.on_core = true;
    thread.core_since = loop_.now();
    return true;
  }

  HostThread *oldest_spinner_on_core() {
    for (HostThread *spinner : spinners_)
      if (spinner->on_core) return spinner;
    return nullptr;
  }

  void stop_spinning(HostThread &thread) {
    thread.spinning = false;
    for (std::size_t i = 0; i < spinners_.size(); ++i)
      if (spinners_[i] == &thread) {
        spinners_.erase(spinners_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }

  void hand_over() {
    if (waiting_.empty()) {
      ++free_;
      return;
    }
    HostThread &next = *waiting_.front();
    waiting_.pop_front();
    next.on_core = true;
    next.core_since = loop_.now();
    if (next.spinning && !next.signalled) return;  // back to spinning on its core
    if (next.spinning) stop_spinning(next);
    loop_.resume_at(loop_.now(), next.parked);
  }

  EventLoop &loop_;
  int free_;
  std::deque<HostThread *> waiting_;
  std::vector<HostThread *> spinners_;
};

/// A FIFO lock with a hold time per acquisition and a hand-over cost for a thread that queued.
/// Lock::Hold is the whole critical section of a fixed length: the awaiter resumes once it has
/// held the lock for `hold` and released it. Lock::Acquire leaves it held, for critical sections
/// that await other things (TensorFlow's EventMgr calls the driver under its mutex); release()
/// ends them.
class Lock {
 public:
  Lock(EventLoop &loop, Time handover) : loop_(loop), handover_(handover) {}

  struct Hold {
    Lock &lock;
    Time hold;
    std::coroutine_handle<> awaiter{};
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> handle) {
      awaiter = handle;
      if (!lock.held_) {
        lock.held_ = true;
        lock.loop_.at(lock.loop_.now() + hold, &Lock::end_hold, this);
      } else {
        lock.queue_.push_back({this, nullptr});
      }
    }
    void await_resume() const noexcept {}
  };
  Hold hold(Time duration) { return {*this, duration}; }

  struct Acquire {
    Lock &lock;
    bool await_ready() const noexcept {
      if (lock.held_) return false;
      lock.held_ = true;
      return true;
    }
    void await_suspend(std::coroutine_handle<> handle) { lock.queue_.push_back({nullptr, handle.address()}); }
    void await_resume() const noexcept {}
  };
  Acquire acquire() { return {*this}; }
  void release() { hand_over(); }

  bool held() const noexcept { return held_; }
  std::uint64_t acquisitions() const noexcept { return acquisitions_; }

 private:
  struct Waiter {
    Hold *hold;             // a fixed critical section, or
    void *acquire_address;  // a coroutine that holds the lock until release()
  };

  static void end_hold(void *object, std::uint64_t) {
    Hold &hold = *static_cast<Hold *>(object);
    Lock &lock = hold.lock;
    ++lock.acquisitions_;
    lock.hand_over();
    hold.awaiter.resume();
  }

  void hand_over() {
    if (queue_.empty()) {
      held_ = false;
      return;
    }
    const Waiter next = queue_.front();
    queue_.pop_front();
    if (next.hold != nullptr)
      loop_.at(loop_.now() + handover_ + next.hold->hold, &Lock::end_hold, next.hold);
    else
      loop_.at(loop_.now() + handover_, &Lock::resume_acquirer, next.acquire_address);
  }
  static void resume_acquirer(void *address, std::uint64_t) {
    std::coroutine_handle<>::from_address(address).resume();
  }

  EventLoop &loop_;
  Time handover_;
  bool held_ = false;
  std::deque<Waiter> queue_;
  std::uint64_t acquisitions_ = 0;
};

/// Threads asleep on a futex (a condition variable's waiters): wake_one makes the oldest
/// runnable `latency` later; it then needs a core.
class WaitList {
 public:
  bool empty() const noexcept { return sleepers_.empty(); }
  std::size_t size() const noexcept { return sleepers_.size(); }
  void add(std::coroutine_handle<> sleeper) { sleepers_.push_back(sleeper); }
  bool wake_one(EventLoop &loop, Time latency) {
    if (sleepers_.empty()) return false;
    loop.resume_at(loop.now() + latency, sleepers_.front());
    sleepers_.pop_front();
    return true;
  }
  void wake_all(EventLoop &loop, Time latency) {
    while (wake_one(loop, latency)) {
    }
  }

 private:
  std::deque<std::coroutine_handle<>> sleepers_;
};

/// Awaitable: parks the awaiter in `list` (the caller has given its core up).
struct Park {
  WaitList &list;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> awaiter) { list.add(awaiter); }
  void await_resume() const noexcept {}
};

/// A one-shot condition that spinning threads wait for (a recorded event reaching its point).
class Signal {
 public:
  bool fired() const noexcept { return fired_; }
  void fire(Cores &cores) {
    fired_ = true;
    for (HostThread *spinner : spinners_) cores.fire(*spinner);
    spinners_.clear();
  }

  /// Awaitable: the thread spins on its core (preemptibly) until the signal fires.
  struct Spin {
    Signal &signal;
    Cores &cores;
    HostThread &thread;
    bool await_ready() const noexcept { return signal.fired_; }
    void await_suspend(std::coroutine_handle<> awaiter) {
      cores.start_spinning(thread, awaiter);
      signal.spinners_.push_back(&thread);
    }
    void await_resume() const noexcept {}
  };
  Spin spin(Cores &cores, HostThread &thread) { return {*this, cores, thread}; }

 private:
  bool fired_ = false;
  std::vector<HostThread *> spinners_;
};

/// A poller's timed sleep that a request may end early (poller_wait.h's doorbell; TensorFlow's
/// poller is not woken early, and rings no doorbell).
class Doorbell {
 public:
  bool sleeping() const noexcept { return sleeper_ != nullptr; }

  /// Awaitable: sleeps until `timeout` (none if negative) or ring(), whichever comes first.
  struct Sleep {
    Doorbell &bell;
    EventLoop &loop;
    Time timeout;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> awaiter) {
      bell.sleeper_ = awaiter.address();
      ++bell.generation_;
      if (timeout >= 0) loop.at(loop.now() + timeout, &Doorbell::time_out, &bell, bell.generation_);
    }
    void await_resume() const noexcept {}
  };
  Sleep sleep(EventLoop &loop, Time timeout) { return {*this, loop, timeout}; }

  /// Wakes the sleeper, runnable `latency` later. Returns whether one slept.
  bool ring(EventLoop &loop, Time latency) {
    if (sleeper_ == nullptr) return false;
    loop.resume_at(loop.now() + latency, std::coroutine_handle<>::from_address(std::exchange(sleeper_, nullptr)));
    ++generation_;
    return true;
  }

 private:
  static void time_out(void *object, std::uint64_t generation) {
    Doorbell &bell = *static_cast<Doorbell *>(object);
    if (bell.sleeper_ == nullptr || generation != bell.generation_) return;
    std::coroutine_handle<>::from_address(std::exchange(bell.sleeper_, nullptr)).resume();
  }

  void *sleeper_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace evpool::model
