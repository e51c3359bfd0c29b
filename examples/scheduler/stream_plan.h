// evpool example scheduler: StreamPlan, what a stack that knows the graph in advance decides about
// each task before the run: its stream, whether its successors need its completion, and which
// task ends each stream's use.
//
// Design rationale
// ----------------
// Streams come from chain_streams.h: each stream is a chain of the graph, so no task waits on the
// GPU behind a task it does not depend on. On top of it, two facts decide how little the host has
// to do per task:
// - a successor on the task's own stream is ordered after it by the stream: it may be enqueued as
//   soon as the task is, with no event and no wait (the executor's follows_at_enqueue, stack.h);
// - a successor on another stream is ordered by hearing of the task's completion before it is
//   enqueued: once the host has seen the work done, anything enqueued later runs after it, so it
//   needs no event and no wait either.
// So a task needs a completion only if some successor runs on another stream; a task whose
// successors all follow it on its stream (every task of independent chains) costs its launch
// alone. A task made ready this way is enqueued after the task before it on its stream: that task
// is either one of its inputs (enqueued, by the first rule), or an ancestor of one of its inputs
// on another stream (chain_streams puts only an ancestor last on a stream a task continues), whose
// completion was seen after it was enqueued.
//
// Each stream is used from its first task's enqueue to its last task's: last_on(stream) says
// which task that is, so that a stack can lease a stream from a pool for that span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "chain_streams.h"
#include "dag.h"

namespace evpool::example {

/// How a stack that follows a plan orders a task before its successors on other streams: by
/// hearing of its completion before enqueuing them, or by an event they wait on.
enum class CrossStreamOrder { kCompletions, kEvents };

class StreamPlan {
 public:
  /// The plan of `dag`, which must not change while the plan is used. Time: chain_streams' and one
  /// pass over the edges. Throws std::bad_alloc.
  explicit StreamPlan(const Dag &dag) : assignment_(chain_streams(dag)), last_on_(assignment_.streams) {
    needed_elsewhere_.resize(dag.size(), false);
    for (TaskId task = 0; task < dag.size(); ++task) {
      last_on_[assignment_.stream_of[task]] = task;
      for (const TaskId next : dag.successors(task))
        if (!same_stream(task, next)) needed_elsewhere_[task] = true;
    }
  }

  std::size_t streams() const noexcept { return assignment_.streams; }
  /// The task's stream: 0 to streams() - 1.
  std::uint32_t stream_of(TaskId task) const noexcept { return assignment_.stream_of[task]; }
  /// The last task of a stream: once it is enqueued, nothing more runs there.
  TaskId last_on(std::uint32_t stream) const noexcept { return last_on_[stream]; }
  bool same_stream(TaskId task, TaskId other) const noexcept { return stream_of(task) == stream_of(other); }
  /// Whether some successor of the task runs on another stream: the only kind that must be
  /// ordered after the task by something other than the stream (an event, or its completion).
  bool needed_elsewhere(TaskId task) const noexcept { return needed_elsewhere_[task]; }

 private:
  StreamAssignment assignment_;
  std::vector<TaskId> last_on_;         // by stream
  std::vector<bool> needed_elsewhere_;  // by task
};

}  // namespace evpool::example
