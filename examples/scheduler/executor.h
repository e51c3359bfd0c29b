// evpool example scheduler: Executor, a task graph run on a GPU from many host threads.
//
// Design rationale
// ----------------
// The loop a GPU scheduler runs, written once over its plumbing (a stack, stack.h), so that the
// same loop runs on evpool and on the designs it replaces:
// - worker threads take ready tasks from a ReadyQueue (ready_queue.h);
// - a worker leases a stream, makes it wait for each input's event, launches the task's kernel,
//   records the task's own event if another task needs it, and asks the stack to call back once
//   the work is done; then it lets the stream go, its work still pending, and takes the next task.
//   A worker never waits for the GPU;
// - the callback releases the task's successors: each counts down its inputs, and the one whose
//   count reaches zero joins the ready queue.
//
// Why both the waits and the callbacks. A successor becomes ready only once its inputs'
// completions are seen, and then their work is done: with a stack whose callbacks report real
// completions the waits are no-ops on the GPU. They are what makes the executor correct under a
// stack whose callback runs as soon as the work is enqueued (the limit stack, limit_stack.h):
// there the GPU alone orders the work, through the events.
//
// What a task keeps (TaskState, one per task, each on cache lines of its own: neighbouring tasks
// are run by different threads):
// - inputs_left: counted down by its inputs' callbacks; the one that reaches zero makes it ready;
// - uses_left: its successors that have still to enqueue their wait on its event; the one that
//   reaches zero hands the event back. Every wait already enqueued is safe from what the pool
//   does with the event next: cudaStreamWaitEvent takes the event's state when it is called;
// - event: written by its worker before notify, read by its successors' workers;
// - ready, seen: when it joined the ready queue and when its completion was seen (the callback
//   began), from the run's start: the latency a scheduler's user waits.
//
// Memory orders. A task's worker writes `event`, then notifies; each stack's completion mechanism
// orders the request before its callback (evpool's queue with release and acquire on its
// channels, the others with a mutex or inside the driver). In the callback, the fetch_sub of
// each successor's inputs_left is acq_rel: release, so that the history of this input (its event
// written) travels with the count; acquire, so that the callback that reaches zero has every
// other input's history too before it pushes the successor. The ready queue's mutex carries it
// on to the worker that pops the successor and reads the events. (The queue's mutex often orders
// the two workers anyway; test/scheduler_test.cc holds the input's worker away from it, so that
// the count alone must, and ThreadSanitizer sees the race if it is relaxed.) uses_left is acq_rel
// the other way round: each successor's wait is enqueued before its release, and the last, which
// hands the event to a pool that gives it to another task's record, acquires them all.
// remaining_ (tasks not yet finished) is acq_rel as well: the callback that finishes the last task
// closes the queue, and run() reads what every callback wrote (times, the first error) once the
// workers are joined.
// A callback counts its task in remaining_ only after it has pushed the successors it made ready,
// so no push is still under way when the run ends (ready_queue.h relies on it).
//
// Successors released at enqueue. A stack may say, by a member follows_at_enqueue(task,
// successor) (stack.h), that a successor runs on the task's own stream, after it: the stream
// orders the two, so the successor needs the task enqueued, not done. The task's worker then
// counts that input down once notify has returned, with the same acq_rel as a callback, and the
// callback skips it. A task that fails before notify returns releases every successor from
// finished(), as without the member; nothing can fail after notify, so each successor's count
// falls once per input either way. The enqueue's release can come after the callback's
// fetch_sub on remaining_, but never the last one: the successor it releases is not finished.
//
// Failure. A stack call that throws, or a completion that reports an error, fails its task. The
// run does not stop at once: callbacks already asked for will come, and they touch the run's
// state. So the run goes on counting: tasks that begin after the failure is known are finished
// without being enqueued (their inputs' events are still handed back), until every task is
// finished, every stream and event is back, and run() can throw the first error. A task made
// ready by a failed input always sees the failure: the flag is set before the failed task is
// counted, and the count reaches the successor's worker through acq_rel and the queue's mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dag.h"
#include "ready_queue.h"
#include "stack.h"

namespace evpool::example {

/// When a task joined the ready queue and when its completion was seen, from the run's start.
struct TaskTimes {
  std::chrono::nanoseconds ready{0};
  std::chrono::nanoseconds seen{0};
};

struct RunResult {
  /// From the moment the first tasks become ready (the workers are started by then, and wait for
  /// them) to the end of the stack's finish(). A scheduler keeps its workers: starting 128 threads
  /// takes milliseconds, which would count against every stack and not against a graph replay.
  std::chrono::nanoseconds wall{0};
  /// Indexed by task id.
  std::vector<TaskTimes> tasks;
};

template <SchedulerStack Stack>
class Executor {
 public:
  using status_type = typename Stack::status_type;

  /// An executor of `dag` on `stack`. Both must outlive it, and the graph must not change while
  /// it runs.
  Executor(Stack &stack, const Dag &dag) noexcept : stack_(stack), dag_(dag) {}
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs every task of the graph once, each after its inputs, on `workers` threads, and returns
  /// once every task's completion has been seen and the stack has finished.
  /// Throws std::invalid_argument, naming the value, for fewer than 1 worker, before anything
  /// runs. When a task fails (see the top), the run still ends with every stream and event handed
  /// back, and then throws the first error: what the failing stack call threw, or
  /// std::runtime_error naming the task and the status its completion reported. Throws
  /// std::system_error if no worker thread can start (if some do, they run the graph, and the
  /// error is thrown after). Not thread-safe: one run at a time.
  RunResult run(int workers) {
    if (workers < 1)
      throw std::invalid_argument("Executor::run: workers is " + std::to_string(workers) + "; it must be at least 1");
    const std::size_t count = dag_.size();
    states_ = std::make_unique<TaskState[]>(count);
    // Relaxed: starting a thread orders all of it before the thread's first step.
    for (TaskId task = 0; task < count; ++task) {
      states_[task].inputs_left.store(dag_.inputs(task).size(), std::memory_order_relaxed);
      states_[task].uses_left.store(dag_.successors(task).size(), std::memory_order_relaxed);
    }
    remaining_.store(count, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    first_error_ = nullptr;
    ready_.reset(count);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(workers));

    // The workers start first and wait in the ready queue, so that the run is timed from its
    // first ready tasks, without the threads' start (see RunResult::wall). The queue's mutex
    // orders start_ and everything written below before the pops that follow the pushes.
    std::exception_ptr not_started;
    for (int worker = 0; worker < workers; ++worker) {
      try {
        threads.emplace_back([this] { work(); });
      } catch (...) {
        not_started = std::current_exception();
        break;
      }
    }
    if (threads.empty()) std::rethrow_exception(not_started);  // nothing ran: no callback can come
    start_ = Clock::now();
    if (count == 0) ready_.close();
    for (TaskId task = 0; task < count; ++task)
      if (dag_.inputs(task).empty()) make_ready(task);
    for (std::thread &thread : threads) thread.join();
    try {
      stack_.finish();
    } catch (...) {
      fail(std::current_exception());
    }
    RunResult result{Clock::now() - start_, {}};
    if (first_error_) std::rethrow_exception(first_error_);
    if (not_started) std::rethrow_exception(not_started);
    result.tasks.resize(count);
    for (TaskId task = 0; task < count; ++task)
      result.tasks[task] = {states_[task].ready, states_[task].seen};
    return result;
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct alignas(128) TaskState {
    std::atomic<std::size_t> inputs_left{0};
    std::atomic<std::size_t> uses_left{0};
    typename Stack::event_type event{};
    std::chrono::nanoseconds ready{0};  // written once, by whoever makes the task ready
    std::chrono::nanoseconds seen{0};   // written once, by whoever finishes the task
  };

  void work() {
    while (const std::optional<TaskId> task = ready_.pop()) run_task(*task);
  }

  void run_task(TaskId task) noexcept {
    bool inputs_handed_back = false;
    // Relaxed: a hint, except where it matters, for the successors of a failed task (see the top).
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        const typename Stack::stream_lease stream = stack_.lease_stream(task);
        for (const TaskId input : dag_.inputs(task))
          if (const auto &event = states_[input].event) stack_.wait(stream, event);
        hand_back_inputs(task);
        inputs_handed_back = true;
        stack_.launch(stream, task, dag_.duration(task));
        if (!dag_.successors(task).empty()) {
          TaskState &own = states_[task];
          own.event = stack_.get_event(task);
          stack_.record(own.event, stream);
        }
        // From here on the task is the callback's, which may already have run when notify returns.
        stack_.notify(stream, [this, task](const status_type &status) noexcept { completed(task, status); });
        release_at_enqueue(task);
        return;
      } catch (...) {
        fail(std::current_exception());
      }
    }
    if (!inputs_handed_back) hand_back_inputs(task);
    finished(task, Clock::now(), /*enqueued=*/false);  // failed or skipped: no completion will come
  }

  // The completion callback.
  void completed(TaskId task, const status_type &status) noexcept {
    const auto seen = Clock::now();
    if (!Stack::succeeded(status)) [[unlikely]] {
      try {
        fail(std::make_exception_ptr(std::runtime_error(
            "Executor: task " + std::to_string(task) + " completed with an error: " + Stack::describe(status))));
      } catch (...) {
        fail(std::current_exception());  // no memory to say so: the bad_alloc is the error
      }
    }
    finished(task, seen, /*enqueued=*/true);
  }

  // Whether `next` was released when `task` was enqueued (see the top).
  bool follows_at_enqueue(TaskId task, TaskId next) const noexcept {
    if constexpr (requires { stack_.follows_at_enqueue(task, next); })
      return stack_.follows_at_enqueue(task, next);
    else
      return false;
  }

  void release_at_enqueue(TaskId task) noexcept {
    for (const TaskId next : dag_.successors(task))
      // acq_rel: see the top.
      if (follows_at_enqueue(task, next) && states_[next].inputs_left.fetch_sub(1, std::memory_order_acq_rel) == 1)
        make_ready(next);
  }

  // `enqueued`: the task's work was enqueued, and release_at_enqueue has released (or will) the
  // successors that follow it on its stream.
  void finished(TaskId task, Clock::time_point seen, bool enqueued) noexcept {
    states_[task].seen = seen - start_;
    for (const TaskId next : dag_.successors(task))
      // acq_rel: see the top.
      if (!(enqueued && follows_at_enqueue(task, next)) &&
          states_[next].inputs_left.fetch_sub(1, std::memory_order_acq_rel) == 1)
        make_ready(next);
    // acq_rel: see the top. After the pushes above, which must not outlive the run.
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) ready_.close();
  }

  void make_ready(TaskId task) noexcept {
    states_[task].ready = Clock::now() - start_;
    ready_.push(task);
  }

  // After the task's waits are enqueued (or instead of them): its share of each input's event.
  void hand_back_inputs(TaskId task) noexcept {
    for (const TaskId input : dag_.inputs(task)) {
      TaskState &producer = states_[input];
      // acq_rel: see the top.
      if (producer.uses_left.fetch_sub(1, std::memory_order_acq_rel) == 1 && producer.event)
        stack_.put_event(std::exchange(producer.event, {}));
    }
  }

  void fail(std::exception_ptr error) noexcept {
    // Relaxed: the exchange elects the first failure, whose thread then finishes a task, and
    // remaining_'s acq_rel carries the write of first_error_ to run() (see the top).
    if (!failed_.exchange(true, std::memory_order_relaxed)) first_error_ = std::move(error);
  }

  Stack &stack_;
  const Dag &dag_;
  std::unique_ptr<TaskState[]> states_;
  ReadyQueue ready_;
  Clock::time_point start_{};
  alignas(128) std::atomic<std::size_t> remaining_{0};
  alignas(128) std::atomic<bool> failed_{false};
  std::exception_ptr first_error_;  // written by the first fail(), read by run() after the join
};

}  // namespace evpool::example
