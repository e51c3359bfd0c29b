// evpool example scheduler: ReadyQueue, the tasks whose inputs are all done, waiting for a worker.
//
// Design rationale
// ----------------
// Workers take tasks from it; completion callbacks put tasks in, on whatever thread the stack
// runs them (a poller, the driver's host-function thread, a waiter thread per stream, or a worker
// itself). It is one FIFO under one std::mutex, with a condition variable that idle workers sleep
// on: the plainest queue that is correct, and the same under every stack, so it favours none.
//
// It never allocates during a run: a run puts every task in exactly once, so an array of one slot
// per task, sized before the run, cannot overflow, and push() cannot fail, as a callback on a
// driver thread must not.
//
// close() ends the run; whoever finishes the last task calls it, typically inside a completion
// callback on a thread the executor does not own. Once the workers have seen it, the run returns
// and its state may be destroyed, this queue included, while that callback is still inside
// close(). So close() notifies while it holds the lock: no worker can return from its wait before
// close() releases the mutex, and releasing it is the last thing close() does (POSIX allows
// destroying a mutex that is unlocked, even while the thread that unlocked it is still returning).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "dag.h"

namespace evpool::example {

/// Thread-safety: push, pop and close may be called from any number of threads at once; reset
/// only while no other call runs.
class ReadyQueue {
 public:
  /// Empties the queue, opens it, and makes room for `capacity` pushes. Throws std::bad_alloc.
  void reset(std::size_t capacity) {
    tasks_.resize(capacity);
    head_ = tail_ = 0;
    closed_ = false;
  }

  /// Appends `task` and wakes a worker. At most `capacity` pushes between resets. Never throws.
  void push(TaskId task) noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      tasks_[tail_++] = task;
    }
    // Outside the lock, so that the woken worker does not block on the mutex at once. Unlike
    // close()'s, this notification cannot outlive the queue: a push is for a task that a
    // finished task made ready, and the executor counts the finished task only after the push
    // has returned, so the run cannot end meanwhile (executor.h).
    wakeup_.notify_one();
  }

  /// The oldest task, waiting while there is none; nothing once the queue is closed.
  std::optional<TaskId> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    wakeup_.wait(lock, [this] { return closed_ || head_ != tail_; });
    if (closed_) return std::nullopt;
    return tasks_[head_++];
  }

  /// Makes every pop, waiting or to come, return nothing. Never throws.
  void close() noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    wakeup_.notify_all();  // under the lock: see the top
  }

 private:
  std::mutex mutex_;
  std::condition_variable wakeup_;
  std::vector<TaskId> tasks_;  // under `mutex_`: [head_, tail_) are ready
  std::size_t head_ = 0;       // under `mutex_`
  std::size_t tail_ = 0;       // under `mutex_`
  bool closed_ = false;        // under `mutex_`
};

}  // namespace evpool::example
