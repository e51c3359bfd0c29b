// evpool example scheduler: the task graphs of the scheduler benchmark (issue 37).
//
// Design rationale
// ----------------
// Three shapes, each pressing on a different part of a scheduler:
// - fan-out/fan-in: layers of many short tasks, each needing two tasks of the layer before. With
//   2 us tasks the GPU finishes work faster than one host thread can enqueue it: the run measures
//   how many tasks the host side (pools, completions, the ready queue) gets through a second;
// - mixed random: tasks from 2 us to 2 ms, 1 to 4 inputs each, so that short work waits behind
//   long work and completions arrive out of order: the run measures latency from ready to done;
// - independent chains: one chain per worker, no task shared: what the stack costs each thread
//   when nothing else is contended.
// The graphs are built from a seed with std::mt19937_64, so a run is repeatable; the distributions
// are the standard library's, so the same seed may give another graph with another library.
//
// Each generator checks its parameters and throws std::invalid_argument naming the one that is
// wrong; std::bad_alloc, and Dag::add's std::length_error past Dag::kMaxTasks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "dag.h"

namespace evpool::example {

/// `layers` layers of `width` tasks of `duration`. Task j of a layer after the first needs tasks
/// j and j + 1 (modulo `width`) of the layer before: each task but the last layer's is the input
/// of two tasks, and each but the first layer's has two inputs (one and one with a width of 1).
/// Task j of layer l has id l * width + j. Throws std::invalid_argument for a width of 0 with
/// layers to fill.
inline Dag fan_out_fan_in(std::size_t layers, std::size_t width = 256,
                          std::chrono::nanoseconds duration = std::chrono::microseconds(2)) {
  if (width == 0 && layers > 0)
    throw std::invalid_argument("fan_out_fan_in: width is 0, so the " + std::to_string(layers) +
                                " layers would hold no task; it must be at least 1");
  Dag dag;
  for (std::size_t layer = 0; layer < layers; ++layer) {
    for (std::size_t j = 0; j < width; ++j) {
      if (layer == 0) {
        dag.add(duration);
        continue;
      }
      const auto previous = static_cast<TaskId>((layer - 1) * width);
      const auto left = static_cast<TaskId>(previous + j), right = static_cast<TaskId>(previous + (j + 1) % width);
      if (left == right)
        dag.add(duration, {left});
      else
        dag.add(duration, {left, right});
    }
  }
  return dag;
}

struct MixedRandomOptions {
  std::size_t tasks = 10'000;
  std::chrono::nanoseconds shortest = std::chrono::microseconds(2);
  std::chrono::nanoseconds longest = std::chrono::milliseconds(2);
  /// Each task after the first needs 1 to max_inputs tasks (as many as exist, if fewer).
  std::size_t max_inputs = 4;
  /// Inputs are drawn among the `window` tasks added just before: the graph moves forward as a
  /// front of about that many tasks, rather than every task being ready almost at once.
  std::size_t window = 256;
  std::uint64_t seed = 1;
};

/// Tasks whose durations are log-uniform between `shortest` and `longest` (as many tasks of 2 to
/// 20 us as of 200 us to 2 ms: a uniform draw would make almost all of them long), each needing a
/// uniform number of inputs in [1, max_inputs], drawn uniformly without repetition from the
/// `window` tasks before it. Throws std::invalid_argument for a shortest duration that is not
/// positive or exceeds the longest, and for a max_inputs or window of 0.
inline Dag mixed_random(const MixedRandomOptions &options = {}) {
  if (options.shortest.count() <= 0 || options.shortest > options.longest)
    throw std::invalid_argument("mixed_random: durations from " + std::to_string(options.shortest.count()) +
                                " to " + std::to_string(options.longest.count()) +
                                " ns; the shortest must be positive and at most the longest");
  if (options.max_inputs == 0)
    throw std::invalid_argument("mixed_random: max_inputs is 0; every task after the first needs at least one");
  if (options.window == 0)
    throw std::invalid_argument(
        "mixed_random: window is 0; inputs are drawn from the window, so it must be at least 1");
  std::mt19937_64 random(options.seed);
  std::uniform_real_distribution<double> log_duration(std::log(static_cast<double>(options.shortest.count())),
                                                      std::log(static_cast<double>(options.longest.count())));
  Dag dag;
  std::vector<TaskId> inputs;
  for (std::size_t id = 0; id < options.tasks; ++id) {
    const auto duration = std::chrono::nanoseconds(std::llround(std::exp(log_duration(random))));
    const std::size_t window = std::min(id, options.window);
    const std::size_t count =
        window == 0
            ? 0
            : std::min(window, std::uniform_int_distribution<std::size_t>(1, options.max_inputs)(random));
    inputs.clear();
    std::uniform_int_distribution<std::size_t> back(1, window == 0 ? 1 : window);
    while (inputs.size() < count) {
      const auto input = static_cast<TaskId>(id - back(random));
      if (std::find(inputs.begin(), inputs.end(), input) == inputs.end()) inputs.push_back(input);
    }
    // Rounding may step outside the bounds by a nanosecond: keep them exact.
    dag.add(std::clamp(duration, options.shortest, options.longest), inputs);
  }
  return dag;
}

/// `chains` chains of `length` tasks of `duration`, each task needing the one before it in its
/// chain. Task i of chain c has id i * chains + c, so the chains advance side by side.
inline Dag independent_chains(std::size_t chains, std::size_t length,
                              std::chrono::nanoseconds duration = std::chrono::microseconds(2)) {
  Dag dag;
  for (std::size_t i = 0; i < length; ++i) {
    for (std::size_t c = 0; c < chains; ++c) {
      if (i == 0)
        dag.add(duration);
      else
        dag.add(duration, {static_cast<TaskId>((i - 1) * chains + c)});
    }
  }
  return dag;
}

}  // namespace evpool::example
