// evpool scheduler model: EventLoop and Task, the virtual clock and the coroutines that run on it.
//
// Design rationale
// ----------------
// The model (scheduler_run.h) plays host threads, the CUDA driver and the GPU against one
// another in virtual time, so that a run of a 50,000-task graph on 128 threads takes a fraction
// of a second of host time and gives the same answer every time. Each host thread is a C++20
// coroutine that awaits what a real thread would spend time on (CPU work, a lock, the driver, a
// sleep); the GPU's work ends at times it computes itself. One queue of timed actions, ordered by
// (time, sequence number), drives both: the sequence number breaks ties in the order the actions
// were scheduled, which is what makes a run deterministic (no two runs order simultaneous actions
// differently).
//
// Task is a lazy coroutine that runs when awaited and resumes its awaiter when it ends (symmetric
// transfer, so that a chain of nested tasks does not grow the host stack). A top-level task is
// started with EventLoop::spawn and is owned by the loop, which destroys it with the loop; a task
// still waiting then (a poller asleep for good) is destroyed where it waits.
//
// Thread-safety: none; one model run belongs to one thread.
#pragma once

#include <coroutine>
#include <cstdint>
#include <exception>
#include <queue>
#include <utility>
#include <vector>

namespace evpool::model {

/// Virtual time, in nanoseconds from the model's start.
using Time = std::int64_t;

class Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation = std::noop_coroutine();

    Task get_return_object() noexcept {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        return self.promise().continuation;
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    // A model has no failure to report: an exception is a bug in the model.
    void unhandled_exception() noexcept { std::terminate(); }
  };

  Task(Task &&other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task &operator=(Task &&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
    handle_.promise().continuation = awaiter;
    return handle_;
  }
  void await_resume() const noexcept {}

  bool done() const noexcept { return handle_.done(); }
  std::coroutine_handle<> handle() const noexcept { return handle_; }

 private:
  explicit Task(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

/// The queue of timed actions. An action is a plain function and two words, so that scheduling
/// allocates nothing beyond the queue's own storage.
class EventLoop {
 public:
  using Action = void (*)(void *object, std::uint64_t argument);

  Time now() const noexcept { return now_; }

  /// Runs `action(object, argument)` at `when` (not before now).
  void at(Time when, Action action, void *object, std::uint64_t argument = 0) {
    queue_.push({when < now_ ? now_ : when, next_sequence_++, action, object, argument});
  }
  void resume_at(Time when, std::coroutine_handle<> handle) { at(when, &resume, handle.address()); }

  /// Starts `task` at `when`; the loop owns it from now on.
  void spawn(Time when, Task task) {
    resume_at(when, task.handle());
    owned_.push_back(std::move(task));
  }

  /// Runs actions in time order until `stop()` returns true or none is left. Returns whether
  /// `stop()` was reached.
  template <class Stop>
  bool run_until(Stop stop) {
    while (!stop()) {
      if (queue_.empty()) return false;
      const Entry entry = queue_.top();
      queue_.pop();
      now_ = entry.when;
      entry.action(entry.object, entry.argument);
    }
    return true;
  }

  std::uint64_t actions_run() const noexcept { return next_sequence_ - queue_.size(); }

 private:
  struct Entry {
    Time when;
    std::uint64_t sequence;
    Action action;
    void *object;
    std::uint64_t argument;
  };
  struct Later {
    bool operator()(const Entry &a, const Entry &b) const noexcept {
      return a.when != b.when ? a.when > b.when : a.sequence > b.sequence;
    }
  };
  static void resume(void *address, std::uint64_t) {
    std::coroutine_handle<>::from_address(address).resume();
  }

  std::priority_queue<Entry, std::vector<Entry>, Later> queue_;
  std::vector<Task> owned_;
  Time now_ = 0;
  std::uint64_t next_sequence_ = 0;
};

/// Awaitable: resumes the awaiter `duration` later.
struct Delay {
  EventLoop &loop;
  Time duration;
  bool await_ready() const noexcept { return duration <= 0; }
  void await_suspend(std::coroutine_handle<> awaiter) { loop.resume_at(loop.now() + duration, awaiter); }
  void await_resume() const noexcept {}
};

}  // namespace evpool::model
