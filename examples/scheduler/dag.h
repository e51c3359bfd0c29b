// evpool example scheduler: Dag, the task graph an executor runs.
//
// Design rationale
// ----------------
// A task is a piece of GPU work of a given length and the tasks whose results it needs, its
// inputs. Inputs must be added before the task that needs them: ids are handed out in the order
// of adding, so every input has a smaller id than its task, the ids are a topological order, and
// no cycle can be built. That one rule replaces a cycle check.
//
// Besides the inputs, the graph keeps what an executor would otherwise work out on every run:
// - the successors of each task, the tasks that name it as an input: whom its completion may
//   make ready;
// - the level of each task, the longest chain of inputs that leads to it (0 for a task without
//   inputs), and its slot, its place among the tasks of its level. Tasks of one level never depend
//   on one another, so all of them may run at once: `width()`, the most tasks of one level, is how
//   many streams a scheduler that knows the graph in advance needs so that no task waits behind
//   another of its level (limit_stack.h gives task t the stream of its slot).
//
// add() checks its input and names what was wrong; a graph that refused a task is unchanged, so
// that a caller may correct the task and add it again.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace evpool::example {

/// A task's id: its position in the order the tasks were added.
using TaskId = std::uint32_t;

/// Thread-safety: like a std::vector: const members may be called from any number of threads
/// while nothing adds.
class Dag {
 public:
  /// The most tasks a graph holds: ids are 32-bit.
  static constexpr std::size_t kMaxTasks = std::numeric_limits<TaskId>::max();

  /// Adds a task of `duration` that needs the tasks `inputs`, and returns its id. Throws, leaving
  /// the graph unchanged, std::invalid_argument for a negative duration, an input that is not a
  /// task added before, or an input named twice; std::length_error once the graph holds
  /// kMaxTasks; std::bad_alloc.
  TaskId add(std::chrono::nanoseconds duration, std::span<const TaskId> inputs) {
    const auto id = static_cast<TaskId>(tasks_.size());
    if (tasks_.size() == kMaxTasks)
      throw std::length_error("Dag::add: the graph already holds the most tasks it can (" +
                              std::to_string(kMaxTasks) + ")");
    if (duration.count() < 0)
      throw std::invalid_argument("Dag::add: task " + std::to_string(id) + " has a negative duration (" +
                                  std::to_string(duration.count()) + " ns)");
    Task task{duration, std::vector<TaskId>(inputs.begin(), inputs.end()), {}, 0, 0};
    for (const TaskId input : inputs) {
      if (input >= id)
        throw std::invalid_argument(
            "Dag::add: input " + std::to_string(input) + " of task " + std::to_string(id) +
            " is not a task added before it (" +
            (id == 0 ? std::string("none is") : "tasks 0 to " + std::to_string(id - 1) + " are") +
            "); add a task's inputs first");
      task.level = std::max(task.level, tasks_[input].level + 1);
    }
    std::vector<TaskId> sorted = task.inputs;
    std::sort(sorted.begin(), sorted.end());
    if (const auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
      throw std::invalid_argument("Dag::add: task " + std::to_string(id) + " names input " +
                                  std::to_string(*twice) + " twice; name each input once");

    // Everything that can throw happens before the first change: the room for the new entries is
    // made first, and the push_backs below it then cannot fail.
    if (task.level == level_sizes_.size()) make_room(level_sizes_);
    make_room(tasks_);
    for (const TaskId input : inputs) make_room(tasks_[input].successors);

    if (task.level == level_sizes_.size()) level_sizes_.push_back(0);
    task.slot = level_sizes_[task.level]++;
    for (const TaskId input : inputs) tasks_[input].successors.push_back(id);
    tasks_.push_back(std::move(task));
    return id;
  }

  TaskId add(std::chrono::nanoseconds duration, std::initializer_list<TaskId> inputs = {}) {
    return add(duration, std::span<const TaskId>(inputs.begin(), inputs.size()));
  }

  /// The number of tasks; their ids are 0 to size() - 1.
  std::size_t size() const noexcept { return tasks_.size(); }
  bool empty() const noexcept { return tasks_.empty(); }

  /// The task's inputs, in the order they were given. Each of the per-task members below throws
  /// std::out_of_range, naming the id, for a task that does not exist.
  std::span<const TaskId> inputs(TaskId task) const { return at(task).inputs; }
  /// The tasks that name `task` as an input, in the order they were added.
  std::span<const TaskId> successors(TaskId task) const { return at(task).successors; }
  std::chrono::nanoseconds duration(TaskId task) const { return at(task).duration; }
  /// The longest chain of inputs that leads to the task: 0 without inputs.
  std::uint32_t level(TaskId task) const { return at(task).level; }
  /// The task's place among the tasks of its level, in the order they were added: 0, 1, 2, ...
  std::uint32_t slot(TaskId task) const { return at(task).slot; }

  /// The number of levels: the longest chain of tasks in the graph.
  std::size_t levels() const noexcept { return level_sizes_.size(); }
  /// The most tasks of one level: how many tasks may run at once, at most.
  std::size_t width() const noexcept {
    return level_sizes_.empty() ? 0 : *std::max_element(level_sizes_.begin(), level_sizes_.end());
  }

 private:
  struct Task {
    std::chrono::nanoseconds duration;
    std::vector<TaskId> inputs;
    std::vector<TaskId> successors;
    std::uint32_t level;
    std::uint32_t slot;
  };

  // Room for one more element, growing geometrically as push_back would.
  template <class T>
  static void make_room(std::vector<T> &vector) {
    if (vector.size() == vector.capacity()) vector.reserve(std::max<std::size_t>(4, 2 * vector.size()));
  }

  const Task &at(TaskId task) const {
    if (task >= tasks_.size())
      throw std::out_of_range("Dag: no task " + std::to_string(task) + " (the graph holds " +
                              std::to_string(tasks_.size()) + ")");
    return tasks_[task];
  }

  std::vector<Task> tasks_;
  std::vector<std::uint32_t> level_sizes_;  // tasks per level
};

}  // namespace evpool::example
