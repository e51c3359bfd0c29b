// evpool example scheduler: SchedulerStack, what the executor needs from the plumbing under it.
//
// Design rationale
// ----------------
// Where streams, events and completions come from is all that differs between evpool and the
// designs it replaces, so that is what a stack is; the executor (executor.h) is written against
// this concept alone. No CUDA type appears in it, which is what lets the tests run the executor
// on a simulated GPU (test/support/simulated_gpu.h) as well as on the nine CUDA stacks.
//
// For each task, the executor asks its stack, in this order:
//   lease_stream(task)           a stream to enqueue the task's work on; the lease ends (the
//                                stream goes back, its work still pending) once the task is
//                                enqueued
//   wait(stream, event)          for each input's event: the GPU runs the task after its inputs
//   launch(stream, task, ns)     the task's kernel
//   get_event(task), record(event, stream)
//                                only for a task that some other task needs
//   notify(stream, done)         done(status) once the work enqueued on the stream so far is done
// and, once every successor of a task has enqueued its wait, the last of them hands the task's
// event back (put_event).
//
// A stack that plans its streams may also have follows_at_enqueue(task, successor), noexcept:
// true when the successor will run on the task's stream, after it, so that the executor may make
// it ready as soon as the task is enqueued (executor.h), without the task's completion. The
// stack must then order the two: lease_stream gives the successor that stream.
//
// notify()'s callback is what moves the graph on, and the contract around it is the one subtle
// part:
// - it may run on any thread (a poller, the driver's host-function thread, a waiter per stream,
//   or the caller's, before notify returns) and concurrently with other callbacks; it makes no
//   CUDA call, because cudaLaunchHostFunc's callbacks may not;
// - it must run exactly once for each notify that returns, and never for one that throws;
// - a stack may run it before the work is done: the limit stack runs it as soon as the work is
//   enqueued. The executor is correct either way, because the waits order the GPU work by
//   themselves; what the callback must follow is the record of the task's event (everything the
//   notifying thread did before notify happens before the callback).
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>

#include "dag.h"

namespace evpool::example {

/// What a stack has created so far (CUDA stacks: driver streams and events, those of its
/// completion mechanism included), for the benchmark's report. Not part of the concept.
struct Created {
  std::uint64_t streams = 0;
  std::uint64_t events = 0;
};

/// A completion callback of the stack's status type, to state the concept with.
template <class Status>
struct CompletionCallbackArchetype {
  void operator()(const Status &) const noexcept {}
};

/// What a stack provides, besides the order and the callback's contract above:
/// - `stream_lease`: what lease_stream returns; its destructor hands the stream back and never
///   throws;
/// - `event_type`: an event the executor keeps between its record and its last wait; default
///   constructible (empty) and contextually convertible to bool (false when empty);
/// - `status_type`: what a completion reports; `succeeded(status)` says whether the work ran
///   without error, `describe(status)` names the error;
/// - put_event never throws (a stack whose pool refuses the event destroys it);
/// - finish(), after the last completion: whatever the stack must still do before the run can be
///   said to be over (the limit stack synchronises the device there).
/// Every other member may throw; the executor then counts the task as failed.
template <class S>
concept SchedulerStack = std::destructible<typename S::stream_lease> &&
    std::default_initializable<typename S::event_type> && std::movable<typename S::event_type> &&
    requires(S &stack, const typename S::stream_lease &stream, typename S::event_type &event, TaskId task,
             std::chrono::nanoseconds duration, const typename S::status_type &status,
             CompletionCallbackArchetype<typename S::status_type> done) {
  { stack.lease_stream(task) } -> std::same_as<typename S::stream_lease>;
  stack.wait(stream, std::as_const(event));
  stack.launch(stream, task, duration);
  { stack.get_event(task) } -> std::same_as<typename S::event_type>;
  stack.record(event, stream);
  { stack.put_event(std::move(event)) }
  noexcept;
  stack.notify(stream, done);
  stack.finish();
  static_cast<bool>(std::as_const(event));
  { S::succeeded(status) } -> std::convertible_to<bool>;
  { S::describe(status) } -> std::convertible_to<std::string>;
};

}  // namespace evpool::example
