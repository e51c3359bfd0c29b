// The scheduler model (bench/scheduler_model/): its mechanics on graphs small enough to reason
// about. A serialised driver bounds throughput at one call per hold time; nine streams on eight
// hardware queues show head-of-line blocking that eight streams do not; with no host cost and no
// shared queues, completions at enqueue take the graph's critical path (support/gpu_time.h), the
// limit's and evpool-ahead's alike, and one stream the sum of the durations; evpool-planned
// continues a chain at enqueue and asks for no completion there, making evpool-ahead's calls; a
// run is deterministic; and the ranking check's helpers (Spearman's correlation, the bench
// output's parser) give the textbook answers.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "scheduler/dag.h"
#include "scheduler/workloads.h"
#include "scheduler_model/calibration.h"
#include "scheduler_model/gpu_model.h"
#include "scheduler_model/ranking.h"
#include "scheduler_model/scheduler_run.h"
#include "support/gpu_time.h"

namespace evpool {
namespace {

using example::Dag;
using model::Calibration;
using model::StackKind;
using model::Time;
using namespace std::chrono_literals;

// A host that costs nothing: every host and driver cost zero, no wake-up latency, no start latency.
Calibration free_host() {
  Calibration c;
  c.driver_handover = c.record_hold = c.wait_hold = c.launch_hold = c.launch_outside = c.query_hold = 0;
  c.synchronize_hold = c.event_create_hold = c.stream_create_hold = c.graph_launch_hold = 0;
  c.evpool_pool_op = c.spinlock_hold = c.spinlock_handover = c.mutex_hold = c.mutex_handover = 0;
  c.round_robin_op = 0;
  c.poller_per_request = 0;
  c.poller_pass = 1000;  // a poller's pass must take some time, or its spin never ends
  c.futex_wake_cost = c.futex_wait_cost = c.wake_latency = c.timer_slack = 0;
  c.kernel_start_latency = c.completion_seen_latency = 0;
  return c;
}

Dag independent_tasks(int count, std::chrono::nanoseconds duration) {
  Dag dag;
  for (int i = 0; i < count; ++i) dag.add(duration);
  return dag;
}

TEST(SchedulerModel, SerialisedDriverBoundsThroughputAtOneCallPerHold) {
  Calibration c = free_host();
  c.launch_hold = 1000;  // tensorflow-exec makes one driver call a task: its launch
  const Dag dag = independent_tasks(64, 0ns);
  for (const int workers : {1, 4, 16}) {
    const model::ModelResult result = model::model_run(dag, StackKind::kTensorflowExec, workers, c);
    EXPECT_EQ(result.wall, 64 * 1000) << workers << " workers";
    EXPECT_EQ(result.driver_calls, 64u + 1u) << "a launch a task and the final synchronisation";
  }
  // Work outside the lock overlaps across threads, the hold does not.
  c.launch_outside = 1000;
  EXPECT_EQ(model::model_run(dag, StackKind::kTensorflowExec, 1, c).wall, 64 * 2000);
  EXPECT_EQ(model::model_run(dag, StackKind::kTensorflowExec, 16, c).wall, 64 * 1000 + 1000);
  // A thread that queued for the lock pays the hand-over too.
  c.launch_outside = 0;
  c.driver_handover = 500;
  EXPECT_EQ(model::model_run(dag, StackKind::kTensorflowExec, 1, c).wall, 64 * 1000);
  EXPECT_GT(model::model_run(dag, StackKind::kTensorflowExec, 16, c).wall, 64 * 1000 + 50 * 500);
}

// When does a short kernel on `short_stream` finish, behind a wait on stream 0 for a 1 ms kernel
// of stream 1, with `streams` streams on 8 hardware queues?
Time short_kernel_done(int streams, model::StreamId short_stream) {
  model::EventLoop loop;
  model::GpuModel gpu(loop, 8, 0);
  for (int i = 0; i < streams; ++i) gpu.create_stream();
  gpu.launch(1, 1'000'000);
  const model::RecordId long_done = gpu.record(1);
  gpu.wait(0, long_done);  // the head of queue 0 until 1 ms
  gpu.launch(short_stream, 1'000);
  const model::RecordId short_done = gpu.record(short_stream);
  Time done = -1;
  gpu.when_reached(short_done, [&] { done = loop.now(); });
  loop.run_until([&] { return done >= 0; });
  return done;
}

TEST(SchedulerModel, StreamsBeyondTheHardwareQueuesBlockBehindAWaitAtTheHead) {
  EXPECT_EQ(short_kernel_done(9, 8), 1'001'000) << "stream 8 shares queue 0 with stream 0's wait";
  EXPECT_EQ(short_kernel_done(8, 7), 1'000) << "stream 7 has a queue of its own";
  EXPECT_EQ(short_kernel_done(9, 7), 1'000);
}

TEST(SchedulerModel, AKernelBehindItsStreamsRunningKernelHoldsItsQueue) {
  model::EventLoop loop;
  model::GpuModel gpu(loop, 1, 0);  // one hardware queue for both streams
  const model::StreamId a = gpu.create_stream(), b = gpu.create_stream();
  gpu.launch(a, 5'000);
  gpu.launch(a, 5'000);  // waits for the first: the queue's head until 5 us
  gpu.launch(b, 1'000);
  const model::RecordId b_done = gpu.record(b);
  Time done = -1;
  gpu.when_reached(b_done, [&] { done = loop.now(); });
  loop.run_until([&] { return done >= 0; });
  EXPECT_EQ(done, 6'000);
  EXPECT_FALSE(gpu.idle(a));
}

TEST(SchedulerModel, CompletionsAtEnqueueTakeTheCriticalPathWithoutHostCost) {
  Calibration c = free_host();
  c.connections = 4096;  // more than the streams: no shared hardware queue
  example::MixedRandomOptions options;
  options.tasks = 300;
  options.longest = 200us;
  const Dag dag = example::mixed_random(options);
  const Time critical = test::critical_path(dag).count();
  EXPECT_EQ(model::model_run(dag, StackKind::kLimit, 4, c).wall, critical);
  EXPECT_EQ(model::model_run(dag, StackKind::kEvpoolAhead, 4, c).wall, critical)
      << "the limit's schedule on pooled streams and events";
  Time sum = 0;
  for (example::TaskId task = 0; task < dag.size(); ++task) sum += dag.duration(task).count();
  EXPECT_EQ(model::model_run(dag, StackKind::kTensorflowExec, 4, c).wall, sum) << "one stream: one line";
  // Stacks that hear of real completions take at least the critical path.
  for (const StackKind stack :
       {StackKind::kEvpool, StackKind::kPytorch, StackKind::kTensorflow, StackKind::kEvpoolPlanned})
    EXPECT_GE(model::model_run(dag, stack, 4, c).wall, critical) << model::name_of(stack);
}

TEST(SchedulerModel, PlannedContinuesChainsAtEnqueueWithTheCallsOfAhead) {
  Calibration c = free_host();
  c.launch_hold = 1000;
  const Dag chains = example::independent_chains(2, 20, 2us);
  // evpool's stack waits for each task's completion before its successor is ready; the planned
  // stack enqueues a chain at the host's pace.
  const model::ModelResult evpool = model::model_run(chains, StackKind::kEvpool, 2, c);
  const model::ModelResult planned = model::model_run(chains, StackKind::kEvpoolPlanned, 2, c);
  EXPECT_LT(planned.wall, evpool.wall);
  EXPECT_EQ(planned.streams_created, 2u) << "a stream a chain";
  EXPECT_EQ(planned.events_created, 0u) << "no task is needed on another stream: no completion asked for";
  // No successor on another stream: the two ways of ordering one make the same calls.
  const model::ModelResult ahead = model::model_run(chains, StackKind::kEvpoolAhead, 2, c);
  EXPECT_EQ(ahead.driver_calls, planned.driver_calls);
  EXPECT_EQ(ahead.wall, planned.wall);
}

TEST(SchedulerModel, PlannedAsksForACompletionOnlyWhereAheadRecordsAnEvent) {
  // Fan-out: every task but the last layer's has a successor on another stream.
  const Dag dag = example::fan_out_fan_in(3, 4, 2us);
  const model::ModelResult planned = model::model_run(dag, StackKind::kEvpoolPlanned, 1, free_host());
  const model::ModelResult ahead = model::model_run(dag, StackKind::kEvpoolAhead, 1, free_host());
  EXPECT_GT(planned.events_created, 0u) << "the queue's events";
  EXPECT_GT(ahead.events_created, 0u) << "the pooled events its successors wait on";
  const Dag chains = example::independent_chains(1, 5, 2us);
  EXPECT_EQ(model::model_run(chains, StackKind::kEvpoolAhead, 1, free_host()).events_created, 0u);
}

TEST(SchedulerModel, ARunIsDeterministic) {
  const Dag dag = example::fan_out_fan_in(6, 16, 2us);
  for (const model::StackName &stack : model::kStackNames) {
    const model::ModelResult first = model::model_run(dag, stack.kind, 4);
    const model::ModelResult second = model::model_run(dag, stack.kind, 4);
    EXPECT_EQ(first.wall, second.wall) << stack.name;
    EXPECT_EQ(first.driver_calls, second.driver_calls) << stack.name;
    EXPECT_EQ(first.cores, second.cores) << stack.name;
    EXPECT_GT(first.tasks_per_s, 0) << stack.name;
  }
}

TEST(SchedulerModelRanking, SpearmanGivesTheTextbookAnswers) {
  EXPECT_DOUBLE_EQ(model::spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(model::spearman({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
  EXPECT_EQ(model::ranks_descending({5, 7, 7, 1}), (std::vector<double>{3, 1.5, 1.5, 4}));
  EXPECT_TRUE(std::isnan(model::spearman({1, 1, 1}, {1, 2, 3}))) << "a constant series has no ranking";
}

TEST(SchedulerModelRanking, ParsesTheBenchmarksLinesAndSkipsTheRest) {
  std::istringstream run("# NVIDIA H100 80GB HBM3, 16 CPUs online, 3 runs per point, scale 1\n"
                         "scheduler workload=mixed threads=16 stack=evpool tasks=10000 tasks_per_s=73040 runs=1/2/3 p50_us=200.0\n"
                         "scheduler workload=mixed threads=16 stack=dali tasks=10000 tasks_per_s=oops\n"
                         "step scheduler-run: 183 s, exit status 0\n");
  const model::Rates rates = model::parse_scheduler_run(run);
  ASSERT_EQ(rates.size(), 1u);
  EXPECT_EQ(rates.at({"mixed", 16, "evpool"}), 73040);
}

}  // namespace
}  // namespace evpool
