// evpool tests: gpu_time, how long a GPU with unlimited parallel hardware and no host cost takes
// to run a task graph on the streams a scheduler put its tasks on.
//
// The model. Each task is a kernel of its duration. It starts once the task enqueued before it on
// its stream is done (a stream runs its work in order) and once its inputs are done (the
// executor's waits); nothing else holds it up. So the time is the longest path through the graph
// of those two kinds of edges. With only the inputs' edges it is the graph's critical path, which
// no schedule beats: a stack whose streams add no false dependency takes exactly that, and every
// other takes at least that. The host's cost is left out on purpose: this measures only what a
// stack's choice of streams costs the GPU (test/scheduler_test.cc checks the limit's this way).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "scheduler/dag.h"

namespace evpool::test {

/// One kernel enqueued: on which stream (any token), which task.
struct Launch {
  std::uint64_t stream;
  example::TaskId task;
};

/// The time the model's GPU takes for `launches`, which list every task of `dag` once, in the
/// order they were enqueued (so each task after its inputs). Throws std::invalid_argument naming
/// a task launched twice, never, or before an input.
inline std::chrono::nanoseconds gpu_time(const example::Dag &dag, const std::vector<Launch> &launches) {
  using std::chrono::nanoseconds;
  std::vector<nanoseconds> done(dag.size(), nanoseconds(-1));
  std::map<std::uint64_t, nanoseconds> stream_free;  // when each stream's last kernel is done
  nanoseconds end{0};
  for (const Launch &launch : launches) {
    if (launch.task >= dag.size() || done[launch.task] >= nanoseconds(0))
      throw std::invalid_argument("gpu_time: task " + std::to_string(launch.task) +
                                  " is not in the graph or launched twice");
    nanoseconds start = stream_free[launch.stream];
    for (const example::TaskId input : dag.inputs(launch.task)) {
      if (done[input] < nanoseconds(0))
        throw std::invalid_argument("gpu_time: task " + std::to_string(launch.task) +
                                    " launched before its input " + std::to_string(input));
      start = std::max(start, done[input]);
    }
    done[launch.task] = stream_free[launch.stream] = start + dag.duration(launch.task);
    end = std::max(end, done[launch.task]);
  }
  if (launches.size() != dag.size())
    throw std::invalid_argument("gpu_time: " + std::to_string(launches.size()) + " launches for " +
                                std::to_string(dag.size()) + " tasks");
  return end;
}

/// The graph's critical path: gpu_time with a stream per task.
inline std::chrono::nanoseconds critical_path(const example::Dag &dag) {
  std::vector<Launch> launches;
  for (example::TaskId task = 0; task < dag.size(); ++task) launches.push_back({task, task});
  return gpu_time(dag, launches);
}

}  // namespace evpool::test
