// evpool example scheduler: chain_streams, streams for a graph known in advance such that no task
// waits on the GPU behind a task it does not depend on.
//
// Design rationale
// ----------------
// A stream runs its work in order, so two tasks on one stream are ordered whether or not one
// needs the other: a false dependency, which a ceiling must not have. The assignment here makes
// every stream a chain of the graph: task t continues a stream only if the task last on it is one
// of t's ancestors (an input, an input's input, ...); otherwise t starts a stream of its own.
// Everything a stream runs before t is then among t's ancestors, all done by the time t's inputs
// are, so the GPU can start t as soon as its inputs are done: the schedule's length is the
// graph's critical path. Pinning tasks by their slot, their place in their level, does not give
// that: on the mixed workload a task then waits behind unrelated tasks of other levels, 1.62 times
// the critical path (the test's model, test/scheduler_test.cc).
//
// Fewer streams matter on a GPU, where beyond CUDA_DEVICE_MAX_CONNECTIONS (8 by default) streams
// share hardware queues. So t looks for such a stream breadth-first among its ancestors, nearest
// first, stopping at the first task that is still last on its stream. Continuing a direct input
// only took 2,242 streams for the mixed workload; searching the ancestors, 1,005, in 66 ms on the
// development machine (fan-out/fan-in takes as many streams as a layer has tasks, 256; independent
// chains one a chain). This is no fewest-chains cover, but the count does not change the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "dag.h"

namespace evpool::example {

struct StreamAssignment {
  /// The stream of each task, by task id: 0 to streams - 1.
  std::vector<std::uint32_t> stream_of;
  std::size_t streams = 0;
};

/// Streams for `dag` such that each stream is a chain of the graph (see the top). Time: at most
/// the ancestors of each task visited once per task; in practice a few. Throws std::bad_alloc.
inline StreamAssignment chain_streams(const Dag &dag) {
  constexpr std::uint32_t kNoStream = std::numeric_limits<std::uint32_t>::max();
  StreamAssignment assignment;
  assignment.stream_of.resize(dag.size());
  std::vector<TaskId> last_task;                                          // by stream
  std::vector<TaskId> searched_for(dag.size(), static_cast<TaskId>(-1));  // by task: the last search it joined
  std::vector<TaskId> ancestors;                                          // the search's queue
  for (TaskId task = 0; task < dag.size(); ++task) {
    std::uint32_t stream = kNoStream;
    ancestors.clear();
    for (const TaskId input : dag.inputs(task)) {
      searched_for[input] = task;
      ancestors.push_back(input);
    }
    for (std::size_t next = 0; next < ancestors.size(); ++next) {
      const TaskId ancestor = ancestors[next];
      if (last_task[assignment.stream_of[ancestor]] == ancestor) {
        stream = assignment.stream_of[ancestor];
        break;
      }
      for (const TaskId further : dag.inputs(ancestor)) {
        if (searched_for[further] == task) continue;
        searched_for[further] = task;
        ancestors.push_back(further);
      }
    }
    if (stream == kNoStream) {
      stream = static_cast<std::uint32_t>(last_task.size());
      last_task.push_back(task);
    }
    last_task[stream] = task;
    assignment.stream_of[task] = stream;
  }
  assignment.streams = last_task.size();
  return assignment;
}

}  // namespace evpool::example
