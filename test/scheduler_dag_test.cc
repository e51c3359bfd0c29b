// The example scheduler's task graph (examples/scheduler/dag.h) and the benchmark's workloads
// (workloads.h): what add() refuses, leaving the graph as it was; successors, levels, slots and
// width; the shape of each generated graph; and the limit's streams (chain_streams.h), which must
// cost the benchmark's graphs nothing beyond their critical path (support/gpu_time.h's model).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/chain_streams.h"
#include "scheduler/dag.h"
#include "scheduler/workloads.h"
#include "support/gpu_time.h"

namespace evpool {
namespace {

using example::Dag;
using example::TaskId;
using namespace std::chrono_literals;

std::vector<TaskId> to_vector(std::span<const TaskId> ids) { return {ids.begin(), ids.end()}; }

// Adding `inputs` throws std::invalid_argument with `message`, and the graph stays as it was.
void expect_refused(Dag &dag, std::chrono::nanoseconds duration, std::vector<TaskId> inputs,
                    const std::string &message) {
  const std::size_t size = dag.size(), levels = dag.levels(), width = dag.width();
  std::vector<std::vector<TaskId>> successors;
  for (TaskId task = 0; task < size; ++task) successors.push_back(to_vector(dag.successors(task)));
  try {
    dag.add(duration, inputs);
    ADD_FAILURE() << "added";
  } catch (const std::invalid_argument &error) {
    EXPECT_EQ(error.what(), message);
  }
  EXPECT_EQ(dag.size(), size);
  EXPECT_EQ(dag.levels(), levels);
  EXPECT_EQ(dag.width(), width);
  for (TaskId task = 0; task < size; ++task) EXPECT_EQ(to_vector(dag.successors(task)), successors[task]);
}

TEST(SchedulerDag, AddRefusesAnInputThatIsNotAnEarlierTaskATwiceNamedInputAndANegativeDuration) {
  Dag dag;
  expect_refused(dag, 1us, {0},
                 "Dag::add: input 0 of task 0 is not a task added before it (none is); add a task's inputs first");
  dag.add(1us);
  dag.add(1us, {0});
  expect_refused(dag, 1us, {0, 2},
                 "Dag::add: input 2 of task 2 is not a task added before it (tasks 0 to 1 are); add a task's inputs "
                 "first");
  expect_refused(dag, 1us, {1, 0, 1}, "Dag::add: task 2 names input 1 twice; name each input once");
  expect_refused(dag, -1ns, {1}, "Dag::add: task 2 has a negative duration (-1 ns)");
  EXPECT_EQ(dag.add(1us, {1, 0}), 2u) << "the inputs, corrected, are taken";
}

TEST(SchedulerDag, AskingForATaskThatDoesNotExistThrowsOutOfRange) {
  Dag dag;
  dag.add(1us);
  EXPECT_THROW((void)dag.inputs(1), std::out_of_range);
  try {
    (void)dag.successors(7);
    ADD_FAILURE() << "returned";
  } catch (const std::out_of_range &error) {
    EXPECT_STREQ(error.what(), "Dag: no task 7 (the graph holds 1)");
  }
}

TEST(SchedulerDag, KeepsSuccessorsLevelsSlotsAndWidth) {
  // 0   1
  // |\ /
  // | 2   3
  // |  \ /
  //  -- 4
  Dag dag;
  dag.add(5us);
  dag.add(6us);
  dag.add(7us, {0, 1});
  dag.add(8us);
  dag.add(9us, {2, 3, 0});
  EXPECT_EQ(to_vector(dag.successors(0)), (std::vector<TaskId>{2, 4}));
  EXPECT_EQ(to_vector(dag.successors(1)), (std::vector<TaskId>{2}));
  EXPECT_EQ(to_vector(dag.successors(4)), (std::vector<TaskId>{}));
  EXPECT_EQ(to_vector(dag.inputs(4)), (std::vector<TaskId>{2, 3, 0}));
  EXPECT_EQ(dag.duration(3), 8us);
  const std::vector<std::uint32_t> levels = {0, 0, 1, 0, 2}, slots = {0, 1, 0, 2, 0};
  for (TaskId task = 0; task < dag.size(); ++task) {
    EXPECT_EQ(dag.level(task), levels[task]) << "task " << task;
    EXPECT_EQ(dag.slot(task), slots[task]) << "task " << task;
  }
  EXPECT_EQ(dag.levels(), 3u);
  EXPECT_EQ(dag.width(), 3u);
  EXPECT_EQ(Dag().width(), 0u);
}

TEST(SchedulerWorkloads, FanOutFanInHasLayersOfWidthTasksEachNeedingTwoOfTheLayerBefore) {
  const Dag dag = example::fan_out_fan_in(5, 256);
  ASSERT_EQ(dag.size(), 5u * 256);
  EXPECT_EQ(dag.levels(), 5u);
  EXPECT_EQ(dag.width(), 256u);
  for (TaskId task = 0; task < dag.size(); ++task) {
    EXPECT_EQ(dag.duration(task), 2us);
    EXPECT_EQ(dag.level(task), task / 256);
    EXPECT_EQ(dag.slot(task), task % 256);
    const std::size_t inputs = task < 256 ? 0 : 2, successors = task >= 4 * 256 ? 0 : 2;
    EXPECT_EQ(dag.inputs(task).size(), inputs) << "task " << task;
    EXPECT_EQ(dag.successors(task).size(), successors) << "task " << task;
    for (const TaskId input : dag.inputs(task)) EXPECT_EQ(input / 256 + 1, task / 256) << "task " << task;
  }
  EXPECT_EQ(to_vector(example::fan_out_fan_in(2, 1).inputs(1)), (std::vector<TaskId>{0}));
  EXPECT_EQ(example::fan_out_fan_in(0, 0).size(), 0u);
  EXPECT_THROW(example::fan_out_fan_in(3, 0), std::invalid_argument);
}

TEST(SchedulerWorkloads, MixedRandomHasOneToFourInputsFromTheWindowAndDurationsInRangeRepeatably) {
  example::MixedRandomOptions options;
  options.tasks = 2000;
  const Dag dag = example::mixed_random(options);
  ASSERT_EQ(dag.size(), 2000u);
  std::size_t short_tasks = 0, long_tasks = 0, inputs_seen[5] = {};
  for (TaskId task = 0; task < dag.size(); ++task) {
    const auto inputs = dag.inputs(task);
    EXPECT_EQ(inputs.empty(), task == 0) << "task " << task;
    EXPECT_LE(inputs.size(), 4u);
    ++inputs_seen[inputs.size()];
    for (const TaskId input : inputs) EXPECT_LE(task - input, 256u) << "task " << task;
    EXPECT_GE(dag.duration(task), 2us);
    EXPECT_LE(dag.duration(task), 2ms);
    short_tasks += dag.duration(task) < 20us;
    long_tasks += dag.duration(task) >= 200us;
  }
  for (std::size_t count = 1; count <= 4; ++count) EXPECT_GT(inputs_seen[count], 300u) << count << " inputs";
  // Log-uniform over three decades: about a third in the first decade, a third in the last.
  EXPECT_GT(short_tasks, 500u);
  EXPECT_GT(long_tasks, 500u);

  const Dag again = example::mixed_random(options);
  for (TaskId task = 0; task < dag.size(); ++task) {
    EXPECT_EQ(to_vector(again.inputs(task)), to_vector(dag.inputs(task)));
    EXPECT_EQ(again.duration(task), dag.duration(task));
  }
  options.seed = 2;
  const Dag other = example::mixed_random(options);
  std::size_t same = 0;
  for (TaskId task = 0; task < dag.size(); ++task) same += other.duration(task) == dag.duration(task);
  EXPECT_LT(same, 10u) << "another seed, another graph";
}

TEST(SchedulerWorkloads, MixedRandomRefusesBadOptionsNamingThem) {
  example::MixedRandomOptions options;
  options.shortest = 3ms;
  try {
    (void)example::mixed_random(options);
    ADD_FAILURE() << "returned";
  } catch (const std::invalid_argument &error) {
    EXPECT_STREQ(error.what(),
                 "mixed_random: durations from 3000000 to 2000000 ns; the shortest must be positive and at most the "
                 "longest");
  }
  options = {};
  options.shortest = 0ns;
  EXPECT_THROW((void)example::mixed_random(options), std::invalid_argument);
  options = {};
  options.max_inputs = 0;
  EXPECT_THROW((void)example::mixed_random(options), std::invalid_argument);
  options = {};
  options.window = 0;
  EXPECT_THROW((void)example::mixed_random(options), std::invalid_argument);
}

TEST(SchedulerWorkloads, IndependentChainsAdvanceSideBySide) {
  const Dag dag = example::independent_chains(8, 10);
  ASSERT_EQ(dag.size(), 80u);
  EXPECT_EQ(dag.width(), 8u);
  EXPECT_EQ(dag.levels(), 10u);
  for (TaskId task = 0; task < dag.size(); ++task) {
    if (task < 8)
      EXPECT_TRUE(dag.inputs(task).empty());
    else
      EXPECT_EQ(to_vector(dag.inputs(task)), (std::vector<TaskId>{task - 8}));
    EXPECT_EQ(dag.successors(task).size(), task < 72 ? 1u : 0u);
  }
}

// The launches of `dag` in id order, task t on stream stream_of(t).
template <class StreamOf>
std::vector<test::Launch> launches_on(const Dag &dag, StreamOf stream_of) {
  std::vector<test::Launch> launches;
  for (TaskId task = 0; task < dag.size(); ++task) launches.push_back({stream_of(task), task});
  return launches;
}

constexpr TaskId kNoTask = static_cast<TaskId>(-1);

// The benchmark's three graphs at full size (bench/scheduler_bench.cc).
TEST(SchedulerChainStreams, EveryStreamIsAChainSoTheBenchmarksGraphsTakeTheirCriticalPath) {
  example::MixedRandomOptions mixed;
  const Dag graphs[] = {example::fan_out_fan_in(200), example::mixed_random(mixed),
                        example::independent_chains(16, 1600)};
  const std::size_t streams[] = {256, 1005, 16};  // chain_streams.h quotes these
  for (std::size_t i = 0; i < std::size(graphs); ++i) {
    const Dag &dag = graphs[i];
    const example::StreamAssignment assignment = example::chain_streams(dag);
    EXPECT_EQ(assignment.streams, streams[i]) << "graph " << i;
    // The task before each one on its stream is one of its ancestors: a search up its inputs,
    // which never goes below that task's id (ids are a topological order), finds it.
    std::vector<TaskId> last(assignment.streams, kNoTask), visited_by(dag.size(), kNoTask), stack;
    for (TaskId task = 0; task < dag.size(); ++task) {
      const TaskId before = std::exchange(last[assignment.stream_of[task]], task);
      if (before == kNoTask) continue;
      stack.assign(dag.inputs(task).begin(), dag.inputs(task).end());
      bool found = false;
      while (!stack.empty() && !found) {
        const TaskId next = stack.back();
        stack.pop_back();
        found = next == before;
        if (next < before || visited_by[next] == task) continue;
        visited_by[next] = task;
        stack.insert(stack.end(), dag.inputs(next).begin(), dag.inputs(next).end());
      }
      if (!found) {
        ADD_FAILURE() << "graph " << i << ": task " << task << " follows task " << before
                      << " on its stream without needing it";
        break;
      }
    }
    EXPECT_EQ(test::gpu_time(dag, launches_on(dag, [&](TaskId t) { return assignment.stream_of[t]; })),
              test::critical_path(dag))
        << "graph " << i;
  }
  // What pinning by slot costs the mixed graph, as chain_streams.h says: 1.62 times.
  const Dag &dag = graphs[1];
  const auto pinned = test::gpu_time(dag, launches_on(dag, [&](TaskId t) { return dag.slot(t) % dag.width(); }));
  EXPECT_NEAR(static_cast<double>(pinned.count()) / static_cast<double>(test::critical_path(dag).count()),
              1.62, 0.005);
}

TEST(SchedulerGpuTime, ATaskWaitsForItsStreamAndItsInputsAndNothingElse) {
  Dag dag;
  const TaskId a = dag.add(5ns), b = dag.add(3ns), c = dag.add(1ns, {a});
  EXPECT_EQ(test::gpu_time(dag, {{0, a}, {1, b}, {2, c}}).count(), 6);  // a, c; b beside
  EXPECT_EQ(test::gpu_time(dag, {{0, b}, {0, a}, {1, c}}).count(), 9);  // b, a on one stream
  EXPECT_EQ(test::critical_path(dag).count(), 6);
  EXPECT_THROW((void)test::gpu_time(dag, {{0, c}, {0, a}, {0, b}}), std::invalid_argument);  // c before a
  EXPECT_THROW((void)test::gpu_time(dag, {{0, a}, {0, b}}), std::invalid_argument);          // c never
}

}  // namespace
}  // namespace evpool
