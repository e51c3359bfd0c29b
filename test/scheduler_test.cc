// The example scheduler's executor (examples/scheduler/executor.h) on a simulated GPU
// (support/simulated_gpu.h), over two host stacks that stand for the two ways a stack can be:
// - evpool's, on the host seams: streams leased from a BasicHandlePool of HostStreamBackend,
//   events from one of HostBackend, completions from a BasicCompletionQueue over
//   HostCompletionBackend, whose requests complete when the simulated device reaches them. The
//   graph moves on real completions;
// - the limit's: a stream per chain of the graph and an event per task needed on another stream,
//   made beforehand, every callback at once, one synchronize at the end. The graph moves as soon
//   as work is enqueued, and only the waits order the device;
// - evpool's planned stacks (evpool_planned_stack.h): the limit's streams leased from the pool for
//   each chain's span, a successor on a task's stream made ready at the task's enqueue; a task
//   needed on another stream orders its successors there by its completion, heard before they are
//   enqueued (kCompletions: no event, no wait), or by a pooled event they wait on (kEvents).
// For each, on each workload and 1 or 4 workers: every kernel runs once, after its inputs' kernels
// (what the device sees); every task is made ready only after its inputs' completions were seen
// (what the executor's times say); and nothing leaks: every stream and event is back in its pool,
// no request finished before its work, and the backends destroy all they created. Then failures: a
// throw at each of a task's steps (lease, wait, launch, get_event, record, notify) and a kernel
// that fails end the run with that error (the first, when a later one follows), launch nothing
// that depends on the failed task, and still leak nothing; the memory orders that carry a task's
// event to its successors and back to the pool, each in a test that fails under ThreadSanitizer
// if it is relaxed; and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "evpool/basic_completion_queue.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"
#include "scheduler/planned_stream_leases.h"
#include "scheduler/dag.h"
#include "scheduler/executor.h"
#include "scheduler/stream_plan.h"
#include "scheduler/workloads.h"
#include "support/counting_stack.h"
#include "support/gpu_time.h"
#include "support/host_completion_backend.h"
#include "support/host_stream_backend.h"
#include "support/simulated_gpu.h"

namespace evpool {
namespace {

using example::Dag;
using example::Executor;
using example::RunResult;
using example::TaskId;
using test::SimulatedGpu;
using namespace std::chrono_literals;

using StreamPool = BasicHandlePool<test::HostStreamBackend, StreamPoolPolicy>;
using EventPool = test::HostCompletionBackend::pool_type;

// What both host stacks share: the simulated device, and a launch that a test can make throw.
class SimulatedSteps {
 public:
  using status_type = int;
  static bool succeeded(int status) noexcept { return status == 0; }
  static std::string describe(int status) { return "host status " + std::to_string(status); }

  explicit SimulatedSteps(SimulatedGpu &gpu) : gpu_(gpu) {}
  /// launch() of `task` throws from now on (of none: nothing).
  void refuse_launch_of(std::optional<TaskId> task) { refused_ = task; }

  void launch(SimulatedGpu::Token stream, TaskId task, std::chrono::nanoseconds /*duration*/) {
    if (refused_ == task) throw std::runtime_error("launch of task " + std::to_string(task) + " refused");
    {
      const std::lock_guard<std::mutex> lock(launches_mutex_);
      launches_.push_back({stream, task});
    }
    gpu_.launch(stream, task);
  }

  /// Every launch so far, in the order they were enqueued (read once the run is over).
  const std::vector<test::Launch> &launches() const noexcept { return launches_; }

 protected:
  SimulatedGpu &gpu_;
  std::optional<TaskId> refused_;

 private:
  std::mutex launches_mutex_;
  std::vector<test::Launch> launches_;  // under launches_mutex_
};

// evpool on the host seams: the same shape as examples/scheduler/evpool_stack.h.
class HostEvpoolStack : public SimulatedSteps {
 public:
  using stream_lease = StreamPool::unique_lease;
  using event_type = HostBackend::Event;

  HostEvpoolStack(SimulatedGpu &gpu, StreamPool &streams, EventPool &events, test::HostCompletionBackend backend)
      : SimulatedSteps(gpu), streams_(streams), events_(events), queue_(std::move(backend)) {}

  stream_lease lease_stream(TaskId) { return streams_.Lease(0); }
  void wait(const stream_lease &stream, const event_type &event) { gpu_.wait(stream.get(), event.get()); }
  void launch(const stream_lease &stream, TaskId task, std::chrono::nanoseconds duration) {
    SimulatedSteps::launch(stream.get(), task, duration);
  }
  event_type get_event(TaskId) { return events_.Get(0); }
  void record(event_type &event, const stream_lease &stream) { gpu_.record(event.get(), stream.get()); }
  void put_event(event_type &&event) noexcept {
    try {
      events_.Put(std::move(event));
    } catch (...) {
      // The pool refused it (out of memory): `event` still owns it, and destroys it.
    }
  }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    (void)queue_.notify(&gpu_.mark(stream.get()), std::forward<F>(done));
  }
  void finish() {}

 private:
  StreamPool &streams_;
  EventPool &events_;
  BasicCompletionQueue<test::HostCompletionBackend> queue_;  // last: its destructor drains first
};

// The limit on the host: everything made beforehand, callbacks at once, the waits alone order.
class HostLimitStack : public SimulatedSteps {
 public:
  using stream_lease = SimulatedGpu::Token;
  using event_type = SimulatedGpu::Token;  // the task's id + 1: 0 is empty

  HostLimitStack(SimulatedGpu &gpu, const Dag &dag) : SimulatedSteps(gpu), plan_(dag) {}

  stream_lease lease_stream(TaskId task) { return plan_.stream_of(task) + std::uint64_t{1}; }
  // As the CUDA limit stack: no wait for an input that ran on the task's own stream.
  void wait(stream_lease stream, event_type event) {
    if (lease_stream(static_cast<TaskId>(event - 1)) != stream) gpu_.wait(stream, event);
  }
  void launch(stream_lease stream, TaskId task, std::chrono::nanoseconds duration) {
    SimulatedSteps::launch(stream, task, duration);
  }
  // As the CUDA limit stack: an event only for a task needed on another stream.
  event_type get_event(TaskId task) { return plan_.needed_elsewhere(task) ? task + std::uint64_t{1} : 0; }
  void record(event_type event, stream_lease stream) {
    if (event != 0) gpu_.record(event, stream);
  }
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(stream_lease, F &&done) {
    done(0);
  }
  void finish() {
    if (const int status = gpu_.synchronize(); status != 0)
      throw std::runtime_error("synchronize: " + describe(status));
  }

 private:
  const example::StreamPlan plan_;
};

// evpool's planned stacks on the host seams: the same shape as examples/scheduler/evpool_planned_stack.h.
template <example::CrossStreamOrder kOrder>
class HostPlannedStack : public SimulatedSteps {
  using Leases = example::PlannedStreamLeases<StreamPool::unique_lease>;

 public:
  using stream_lease = Leases::Lease;
  struct event_type {
    HostBackend::Event event;
    std::uint32_t planned_stream = 0;  // as the CUDA stack's: the plan's index, not the token
    explicit operator bool() const noexcept { return static_cast<bool>(event); }
  };

  HostPlannedStack(SimulatedGpu &gpu, const Dag &dag, StreamPool &streams, EventPool &events,
                   test::HostCompletionBackend backend)
      : SimulatedSteps(gpu), plan_(dag), leases_(plan_), streams_(streams), events_(events),
        queue_(std::move(backend)) {}

  stream_lease lease_stream(TaskId task) {
    return leases_.lease(task, [this] { return streams_.Lease(0); });
  }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept {
    return plan_.same_stream(task, successor);
  }
  void wait(const stream_lease &stream, const event_type &input) {
    if (input.planned_stream != plan_.stream_of(stream.task())) gpu_.wait(stream.get(), input.event.get());
  }
  void launch(const stream_lease &stream, TaskId task, std::chrono::nanoseconds duration) {
    SimulatedSteps::launch(stream.get(), task, duration);
  }
  event_type get_event(TaskId task) {
    if (kOrder == example::CrossStreamOrder::kCompletions || !plan_.needed_elsewhere(task)) return {};
    return {events_.Get(0), plan_.stream_of(task)};
  }
  void record(const event_type &event, const stream_lease &stream) {
    if (event) gpu_.record(event.event.get(), stream.get());
  }
  void put_event(event_type &&event) noexcept {
    try {
      events_.Put(std::move(event.event));
    } catch (...) {
      // The pool refused it (out of memory): `event` still owns it, and destroys it.
    }
  }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    if (kOrder == example::CrossStreamOrder::kCompletions && plan_.needed_elsewhere(stream.task()))
      (void)queue_.notify(&gpu_.mark(stream.get()), std::forward<F>(done));
    else
      done(0);
  }
  void finish() {
    leases_.end_all();
    if (const int status = gpu_.synchronize(); status != 0)
      throw std::runtime_error("synchronize: " + describe(status));
  }

  const example::StreamPlan &plan() const noexcept { return plan_; }
  std::uint64_t completions_asked() const noexcept { return queue_.stats().requests; }

 private:
  const example::StreamPlan plan_;
  Leases leases_;
  StreamPool &streams_;
  EventPool &events_;
  BasicCompletionQueue<test::HostCompletionBackend> queue_;  // last: its destructor drains first
};
using HostCompletionsPlannedStack = HostPlannedStack<example::CrossStreamOrder::kCompletions>;
using HostAheadPlannedStack = HostPlannedStack<example::CrossStreamOrder::kEvents>;

static_assert(example::SchedulerStack<HostEvpoolStack> && example::SchedulerStack<HostLimitStack> &&
              example::SchedulerStack<HostCompletionsPlannedStack> &&
              example::SchedulerStack<HostAheadPlannedStack>);

// What the device saw: each kernel's runs, and kernels that ran before one of their inputs had.
struct DeviceLog {
  explicit DeviceLog(const Dag &dag) : dag(dag), runs(dag.size(), 0) {}

  // The simulated kernel (on the device thread, under its lock).
  int run(TaskId task) {
    // Slow kernels let the host run ahead of the device, so that work enqueued without the order
    // it needs runs before its inputs.
    if (kernel_time > std::chrono::nanoseconds(0)) std::this_thread::sleep_for(kernel_time);
    for (const TaskId input : dag.inputs(task))
      if (runs[input] == 0 && early++ == 0)
        first_early = "task " + std::to_string(task) + " ran before its input " + std::to_string(input);
    ++runs[task];
    return failing == task ? kFailure : 0;
  }

  static constexpr int kFailure = 7;
  const Dag &dag;
  std::vector<int> runs;
  std::size_t early = 0;
  std::string first_early;
  std::optional<TaskId> failing;            // set before the run
  std::chrono::nanoseconds kernel_time{0};  // set before the run
};

// Every task ran once, after its inputs on the device, and was made ready after its inputs'
// completions were seen, except those of the inputs it follows on their stream (`plan`'s same
// stream), which it may be made ready before.
void expect_every_task_once_after_its_inputs(const Dag &dag, const DeviceLog &log, const RunResult &result,
                                             const example::StreamPlan *plan = nullptr) {
  EXPECT_EQ(log.early, 0u) << log.first_early;
  std::size_t not_once = 0, ready_early = 0;
  std::string first;
  for (TaskId task = 0; task < dag.size(); ++task) {
    if (log.runs[task] != 1 && not_once++ == 0)
      first += "task " + std::to_string(task) + " ran " + std::to_string(log.runs[task]) + " times; ";
    for (const TaskId input : dag.inputs(task))
      if (!(plan && plan->same_stream(input, task)) && result.tasks[task].ready < result.tasks[input].seen &&
          ready_early++ == 0)
        first += "task " + std::to_string(task) + " was ready at " +
                 std::to_string(result.tasks[task].ready.count()) + " ns, before its input " +
                 std::to_string(input) + "'s completion was seen at " +
                 std::to_string(result.tasks[input].seen.count()) + " ns; ";
  }
  EXPECT_EQ(not_once, 0u) << first;
  EXPECT_EQ(ready_early, 0u) << first;
}

// The executor handed back every lease and event it took, and heard each completion it asked for,
// one a task, once.
template <class Counted>
void expect_balanced(const Counted &counted, std::size_t tasks) {
  const auto &counts = counted.counts();
  EXPECT_EQ(counts.leases.load(), counts.leases_ended.load()) << "stream leases not ended";
  EXPECT_EQ(counts.events.load(), counts.events_back.load()) << "events not handed back";
  EXPECT_EQ(counts.notifies.load(), tasks);
  EXPECT_EQ(counts.callbacks.load(), counts.notifies.load());
}

// The tasks that need `task`, directly or not.
std::vector<bool> descendants(const Dag &dag, TaskId task) {
  std::vector<bool> below(dag.size(), false);
  for (TaskId later = task + 1; later < dag.size(); ++later)
    for (const TaskId input : dag.inputs(later))
      if (input == task || below[input]) below[later] = true;
  return below;
}

// After a run that a refused step ended: no task ran twice, none that needs the refused one
// (`after`) ran, none ran before its inputs, and the executor ended every lease, handed back every
// event and heard every completion it asked for.
template <class Counted>
void expect_refusal_contained(const Dag &dag, const DeviceLog &log, const std::vector<bool> &after,
                              const Counted &counted) {
  for (TaskId task = 0; task < dag.size(); ++task) {
    EXPECT_LE(log.runs[task], 1) << "task " << task;
    if (after[task]) {
      EXPECT_EQ(log.runs[task], 0) << "task " << task << " needs the refused one";
    }
  }
  EXPECT_EQ(log.early, 0u) << log.first_early;
  const auto &counts = counted.counts();
  EXPECT_EQ(counts.leases.load(), counts.leases_ended.load()) << "stream leases not ended";
  EXPECT_EQ(counts.events.load(), counts.events_back.load()) << "events not handed back";
  EXPECT_EQ(counts.callbacks.load(), counts.notifies.load());
}

struct Workload {
  const char *name;
  Dag (*make)();
};

void PrintTo(const Workload &workload, std::ostream *out) { *out << workload.name; }

const Workload kWorkloads[] = {
    {"FanOutFanIn", [] { return example::fan_out_fan_in(6, 16); }},
    {"MixedRandom",
     [] {
       example::MixedRandomOptions options;
       options.tasks = 300;
       options.window = 24;
       return example::mixed_random(options);
     }},
    {"IndependentChains", [] { return example::independent_chains(4, 25); }},
};

// Everything a run on the evpool host stack needs, declared in the order it must be destroyed in
// reverse: the queue (in the stack) drains while the device still runs, and the pools outlive both.
struct EvpoolBench {
  explicit EvpoolBench(const Dag &dag) : log(dag) {}

  // The stack's queue must be gone: every stream and event is back, none early.
  void expect_all_back() {
    EXPECT_EQ(streams->stats().total().outstanding, 0) << "streams not handed back";
    EXPECT_EQ(events->stats().total().outstanding, 0) << "events not handed back";
    EXPECT_EQ(completions.early_finishes(), 0u) << completions.first_early_finish();
    EXPECT_EQ(gpu.pending(), 0u);
  }

  test::HostStreamBackend stream_backend{1};
  HostBackend event_backend{1};
  std::optional<StreamPool> streams{std::in_place, stream_backend};
  std::optional<EventPool> events{std::in_place, event_backend};
  test::HostCompletionBackend completions{*events};
  DeviceLog log;
  SimulatedGpu gpu{[this](std::uint32_t task) { return log.run(task); }};
};

// The backends destroyed all they created once the pools are gone.
void expect_backends_even(EvpoolBench &bench) {
  bench.streams.reset();
  bench.events.reset();
  EXPECT_EQ(bench.stream_backend.created(), bench.stream_backend.destroyed());
  EXPECT_EQ(bench.event_backend.created(), bench.event_backend.destroyed());
}

class ExecutorOnSimulatedGpu : public testing::TestWithParam<std::tuple<Workload, int>> {};

TEST_P(ExecutorOnSimulatedGpu, EvpoolStackRunsEveryTaskOnceAfterItsInputsAndLeaksNothing) {
  const auto &[workload, workers] = GetParam();
  const Dag dag = workload.make();
  EvpoolBench bench(dag);
  {
    HostEvpoolStack stack(bench.gpu, *bench.streams, *bench.events, bench.completions);
    test::CountingStack<HostEvpoolStack> counted(stack);
    Executor<test::CountingStack<HostEvpoolStack>> executor(counted, dag);
    const RunResult result = executor.run(workers);
    bench.gpu.synchronize();
    expect_every_task_once_after_its_inputs(dag, bench.log, result);
    expect_balanced(counted, dag.size());
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

TEST_P(ExecutorOnSimulatedGpu, LimitStackRunsEveryTaskOnceAfterItsInputsThroughTheWaitsAlone) {
  const auto &[workload, workers] = GetParam();
  const Dag dag = workload.make();
  DeviceLog log(dag);
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack stack(gpu, dag);
  test::CountingStack<HostLimitStack> counted(stack);
  Executor<test::CountingStack<HostLimitStack>> executor(counted, dag);
  const RunResult result = executor.run(workers);
  EXPECT_EQ(gpu.pending(), 0u) << "finish() returned before the device was done";
  expect_every_task_once_after_its_inputs(dag, log, result);
  expect_balanced(counted, dag.size());
}

// Either planned stack, twice on the same pools: every task once after its inputs (slow kernels,
// so that work enqueued without the order it needs overtakes), a completion asked for (kCompletions)
// or an event taken (kEvents) for each task needed on another stream and for no other, and nothing
// leaked.
template <example::CrossStreamOrder kOrder>
void expect_planned_runs_in_order_and_leak_nothing(const Dag &dag, int workers) {
  EvpoolBench bench(dag);
  {
    bench.log.kernel_time = 20us;
    HostPlannedStack<kOrder> stack(bench.gpu, dag, *bench.streams, *bench.events, bench.completions);
    test::CountingStack<HostPlannedStack<kOrder>> counted(stack);
    Executor<test::CountingStack<HostPlannedStack<kOrder>>> executor(counted, dag);
    for (int run = 0; run < 2; ++run) {  // the second on the streams the first handed back
      const RunResult result = executor.run(workers);
      EXPECT_EQ(bench.gpu.pending(), 0u) << "finish() returned before the device was done";
      // kEvents: every callback runs inside notify, so even a successor released at enqueue is
      // made ready after its input's completion was seen, notify having returned.
      expect_every_task_once_after_its_inputs(
          dag, bench.log, result, kOrder == example::CrossStreamOrder::kEvents ? nullptr : &stack.plan());
      std::fill(bench.log.runs.begin(), bench.log.runs.end(), 0);
    }
    expect_balanced(counted, 2 * dag.size());
    std::uint64_t needed = 0;
    for (TaskId task = 0; task < dag.size(); ++task) needed += stack.plan().needed_elsewhere(task);
    const bool events = kOrder == example::CrossStreamOrder::kEvents;
    EXPECT_EQ(counted.counts().events.load(), events ? 2 * needed : 0) << "an event for each task needed elsewhere";
    EXPECT_EQ(stack.completions_asked(), events ? 0 : 2 * needed) << "a completion for each task needed elsewhere";
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

TEST_P(ExecutorOnSimulatedGpu, PlannedStackRunsEveryTaskOnceAfterItsInputsThroughStreamsAndCompletionsAlone) {
  const auto &[workload, workers] = GetParam();
  expect_planned_runs_in_order_and_leak_nothing<example::CrossStreamOrder::kCompletions>(workload.make(), workers);
}

TEST_P(ExecutorOnSimulatedGpu, AheadStackRunsEveryTaskOnceAfterItsInputsThroughStreamsAndEventsAlone) {
  const auto &[workload, workers] = GetParam();
  expect_planned_runs_in_order_and_leak_nothing<example::CrossStreamOrder::kEvents>(workload.make(), workers);
}

// The limit is a true ceiling: on the model of gpu_time.h its streams cost the GPU nothing beyond
// the graph's critical path, and a stack that takes streams as it goes (evpool's) takes no less.
TEST_P(ExecutorOnSimulatedGpu, NoStackFinishesBeforeTheLimitWhichTakesTheCriticalPath) {
  const auto &[workload, workers] = GetParam();
  const Dag dag = workload.make();
  const auto shortest = test::critical_path(dag);

  DeviceLog log(dag);
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack limit(gpu, dag);
  Executor<HostLimitStack>(limit, dag).run(workers);
  const auto limit_time = test::gpu_time(dag, limit.launches());
  EXPECT_EQ(limit_time, shortest) << "the limit's streams hold a task behind one it does not need";

  EvpoolBench bench(dag);
  {
    HostEvpoolStack stack(bench.gpu, *bench.streams, *bench.events, bench.completions);
    Executor<HostEvpoolStack>(stack, dag).run(workers);
    EXPECT_GE(test::gpu_time(dag, stack.launches()), limit_time);
  }
  EvpoolBench planned_bench(dag);
  {
    HostCompletionsPlannedStack stack(planned_bench.gpu, dag, *planned_bench.streams, *planned_bench.events,
                                      planned_bench.completions);
    Executor<HostCompletionsPlannedStack>(stack, dag).run(workers);
    EXPECT_GE(test::gpu_time(dag, stack.launches()), limit_time);
  }
  EvpoolBench ahead_bench(dag);
  {
    HostAheadPlannedStack stack(ahead_bench.gpu, dag, *ahead_bench.streams, *ahead_bench.events,
                                ahead_bench.completions);
    Executor<HostAheadPlannedStack>(stack, dag).run(workers);
    // No less than the limit, and not exactly it: the host seam's streams never read busy, so a
    // chain that ends may hand its pool stream to a chain that starts while its work is queued,
    // which a CUDA pool never does (a worker that runs a whole chain before the other roots are
    // pushed made it 2x on IndependentChains).
    EXPECT_GE(test::gpu_time(dag, stack.launches()), limit_time);
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, ExecutorOnSimulatedGpu,
                         testing::Combine(testing::ValuesIn(kWorkloads), testing::Values(1, 4)),
                         [](const testing::TestParamInfo<ExecutorOnSimulatedGpu::ParamType> &info) {
                           return std::string(std::get<0>(info.param).name) + "With" +
                                  std::to_string(std::get<1>(info.param)) + "Workers";
                         });

TEST(ExecutorFailures, ALaunchThatThrowsEndsTheRunWithItsErrorLaunchesNothingAfterItAndLeaksNothing) {
  const Dag dag = example::fan_out_fan_in(6, 16);
  constexpr TaskId kRefused = 40;  // layer 2
  const std::vector<bool> after = descendants(dag, kRefused);
  EvpoolBench bench(dag);
  {
    HostEvpoolStack stack(bench.gpu, *bench.streams, *bench.events, bench.completions);
    stack.refuse_launch_of(kRefused);
    Executor<HostEvpoolStack> executor(stack, dag);
    try {
      executor.run(4);
      ADD_FAILURE() << "run() returned after a launch threw";
    } catch (const std::runtime_error &error) {
      EXPECT_STREQ(error.what(), "launch of task 40 refused");
    }
    bench.gpu.synchronize();
    EXPECT_EQ(bench.log.runs[kRefused], 0);
    for (TaskId task = 0; task < dag.size(); ++task) {
      EXPECT_LE(bench.log.runs[task], 1) << "task " << task;
      if (after[task]) {
        EXPECT_EQ(bench.log.runs[task], 0) << "task " << task << " needs the refused one";
      }
    }
    EXPECT_EQ(bench.log.early, 0u) << bench.log.first_early;

    // The executor and the stack are as good as new.
    stack.refuse_launch_of(std::nullopt);
    bench.log.runs.assign(dag.size(), 0);
    const RunResult result = executor.run(4);
    bench.gpu.synchronize();
    expect_every_task_once_after_its_inputs(dag, bench.log, result);
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

// The planned stack's streams stay leased for their chains' spans; a run that fails skips the
// tasks that would end some spans, and finish() must still hand every stream back.
TEST(ExecutorFailures, APlannedRunThatFailsHandsBackEveryStreamOfTheChainsItCutShort) {
  const Dag dag = example::independent_chains(4, 25);
  constexpr TaskId kRefused = 4 * 10 + 2;  // task 10 of chain 2
  EvpoolBench bench(dag);
  {
    HostCompletionsPlannedStack stack(bench.gpu, dag, *bench.streams, *bench.events, bench.completions);
    stack.refuse_launch_of(kRefused);
    Executor<HostCompletionsPlannedStack> executor(stack, dag);
    EXPECT_THROW(executor.run(2), std::runtime_error);
    EXPECT_EQ(bench.streams->stats().total().outstanding, 0) << "a chain cut short kept its stream";
    EXPECT_EQ(bench.log.runs[kRefused], 0);
    EXPECT_EQ(bench.log.runs[kRefused + 4], 0) << "the refused task's successor ran";
    EXPECT_EQ(bench.log.early, 0u) << bench.log.first_early;
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

TEST(ExecutorFailures, AKernelThatFailsEndsTheRunWithItsStatusLaunchesNothingAfterItAndLeaksNothing) {
  const Dag dag = example::fan_out_fan_in(6, 16);
  constexpr TaskId kFailing = 40;
  const std::vector<bool> after = descendants(dag, kFailing);
  EvpoolBench bench(dag);
  bench.log.failing = kFailing;
  {
    HostEvpoolStack stack(bench.gpu, *bench.streams, *bench.events, bench.completions);
    Executor<HostEvpoolStack> executor(stack, dag);
    try {
      executor.run(4);
      ADD_FAILURE() << "run() returned after a kernel failed";
    } catch (const std::runtime_error &error) {
      // The failure is the stream's from then on: the first completion to report it may be of a
      // later task on the same stream.
      EXPECT_NE(std::string(error.what()).find("completed with an error: host status 7"), std::string::npos)
          << error.what();
    }
    bench.gpu.synchronize();
    EXPECT_EQ(bench.log.runs[kFailing], 1);
    for (TaskId task = 0; task < dag.size(); ++task)
      if (after[task]) {
        EXPECT_EQ(bench.log.runs[task], 0) << "task " << task << " needs the failed one";
      }
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

// A stack over another whose calls for one task throw at one step: each step the executor takes
// for a task (stack.h) may fail, and each leaves a different amount of the task's work enqueued
// and its event got or not. A worker runs a task's steps on one thread, from its lease to its
// notify, so the task is the worker's last lease.
enum class Step { kLease, kWait, kLaunch, kGetEvent, kRecord, kNotify };
const char *const kStepNames[] = {"lease", "wait", "launch", "get_event", "record", "notify"};
void PrintTo(Step step, std::ostream *out) { *out << kStepNames[static_cast<int>(step)]; }

template <example::SchedulerStack Inner>
class FaultyStack {
 public:
  using stream_lease = typename Inner::stream_lease;
  using event_type = typename Inner::event_type;
  using status_type = typename Inner::status_type;
  static bool succeeded(const status_type &status) noexcept { return Inner::succeeded(status); }
  static std::string describe(const status_type &status) { return Inner::describe(status); }

  FaultyStack(Inner &inner, Step step, TaskId task) : inner_(inner), step_(step), task_(task) {}
  void heal() { healed_ = true; }

  stream_lease lease_stream(TaskId task) {
    current = task;
    refuse(Step::kLease);
    return inner_.lease_stream(task);
  }
  void wait(const stream_lease &stream, const event_type &event) {
    refuse(Step::kWait);
    inner_.wait(stream, event);
  }
  void launch(const stream_lease &stream, TaskId task, std::chrono::nanoseconds duration) {
    refuse(Step::kLaunch);
    inner_.launch(stream, task, duration);
  }
  event_type get_event(TaskId task) {
    refuse(Step::kGetEvent);
    return inner_.get_event(task);
  }
  void record(event_type &event, const stream_lease &stream) {
    refuse(Step::kRecord);
    inner_.record(event, stream);
  }
  void put_event(event_type &&event) noexcept { inner_.put_event(std::move(event)); }
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    refuse(Step::kNotify);
    inner_.notify(stream, std::forward<F>(done));
  }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept requires
      requires(const Inner &inner, TaskId id) {
    inner.follows_at_enqueue(id, id);
  }
  { return inner_.follows_at_enqueue(task, successor); }
  void finish() { inner_.finish(); }

 private:
  void refuse(Step step) const {
    if (!healed_ && step == step_ && current == task_)
      throw std::runtime_error(std::string(kStepNames[static_cast<int>(step)]) + " of task " +
                               std::to_string(task_) + " refused");
  }

  static inline thread_local TaskId current = 0;
  Inner &inner_;
  const Step step_;
  const TaskId task_;
  bool healed_ = false;  // changed only between runs
};

class ExecutorStepFailures : public testing::TestWithParam<Step> {};

TEST_P(ExecutorStepFailures, EndTheRunWithTheirErrorLaunchNothingAfterTheTaskAndLeakNothing) {
  const Dag dag = example::fan_out_fan_in(6, 16);
  constexpr TaskId kRefused = 40;  // layer 2: two inputs, two successors
  const std::vector<bool> after = descendants(dag, kRefused);
  EvpoolBench bench(dag);
  {
    HostEvpoolStack stack(bench.gpu, *bench.streams, *bench.events, bench.completions);
    FaultyStack<HostEvpoolStack> faulty(stack, GetParam(), kRefused);
    test::CountingStack<FaultyStack<HostEvpoolStack>> counted(faulty);
    Executor<test::CountingStack<FaultyStack<HostEvpoolStack>>> executor(counted, dag);
    try {
      executor.run(4);
      ADD_FAILURE() << "run() returned after a step threw";
    } catch (const std::runtime_error &error) {
      EXPECT_EQ(std::string(error.what()),
                std::string(kStepNames[static_cast<int>(GetParam())]) + " of task 40 refused");
    }
    bench.gpu.synchronize();
    expect_refusal_contained(dag, bench.log, after, counted);
    EXPECT_LT(counted.counts().notifies.load(), dag.size());

    // The executor and the stack are as good as new.
    faulty.heal();
    bench.log.runs.assign(dag.size(), 0);
    const RunResult result = executor.run(4);
    bench.gpu.synchronize();
    expect_every_task_once_after_its_inputs(dag, bench.log, result);
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

INSTANTIATE_TEST_SUITE_P(EachStep, ExecutorStepFailures,
                         testing::Values(Step::kLease, Step::kWait, Step::kLaunch, Step::kGetEvent,
                                         Step::kRecord, Step::kNotify),
                         [](const testing::TestParamInfo<Step> &info) {
                           std::string name = kStepNames[static_cast<int>(info.param)];
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

// A planned stack whose step throws for a task that has a successor on its own stream (released at
// enqueue) and one on another: the run ends with that error, nothing after the task runs, every
// lease, event and pool stream is back, and a second run on the same executor and stack works.
template <example::CrossStreamOrder kOrder>
void expect_planned_step_failure_recovers(Step step) {
  if (kOrder == example::CrossStreamOrder::kCompletions && step == Step::kWait)
    GTEST_SKIP() << "kCompletions enqueues no wait";
  const Dag dag = example::fan_out_fan_in(6, 16);
  const example::StreamPlan plan(dag);
  std::optional<TaskId> refused;
  for (TaskId task = 0; task < dag.size() && !refused; ++task) {
    bool same = false, other = false;
    for (const TaskId next : dag.successors(task)) (plan.same_stream(task, next) ? same : other) = true;
    if (same && other && dag.inputs(task).size() >= 2) refused = task;
  }
  ASSERT_TRUE(refused) << "no task with successors on both kinds of stream";
  const std::vector<bool> after = descendants(dag, *refused);
  EvpoolBench bench(dag);
  {
    bench.log.kernel_time = 5us;
    HostPlannedStack<kOrder> stack(bench.gpu, dag, *bench.streams, *bench.events, bench.completions);
    FaultyStack<HostPlannedStack<kOrder>> faulty(stack, step, *refused);
    test::CountingStack<FaultyStack<HostPlannedStack<kOrder>>> counted(faulty);
    Executor<test::CountingStack<FaultyStack<HostPlannedStack<kOrder>>>> executor(counted, dag);
    try {
      executor.run(4);
      ADD_FAILURE() << "run() returned after a step threw";
    } catch (const std::runtime_error &error) {
      EXPECT_EQ(std::string(error.what()), std::string(kStepNames[static_cast<int>(step)]) + " of task " +
                                               std::to_string(*refused) + " refused");
    }
    EXPECT_EQ(bench.streams->stats().total().outstanding, 0) << "a planned stream was not handed back";
    expect_refusal_contained(dag, bench.log, after, counted);

    faulty.heal();
    for (int run = 0; run < 2; ++run) {
      bench.log.runs.assign(dag.size(), 0);
      const RunResult result = executor.run(4);
      expect_every_task_once_after_its_inputs(dag, bench.log, result, &stack.plan());
      EXPECT_EQ(bench.streams->stats().total().outstanding, 0);
    }
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

class PlannedStepFailures : public testing::TestWithParam<Step> {};

TEST_P(PlannedStepFailures, OfThePlannedStackEndTheRunHandEveryStreamBackAndLeaveTheExecutorAsGoodAsNew) {
  expect_planned_step_failure_recovers<example::CrossStreamOrder::kCompletions>(GetParam());
}

TEST_P(PlannedStepFailures, OfTheAheadStackEndTheRunHandEveryStreamBackAndLeaveTheExecutorAsGoodAsNew) {
  expect_planned_step_failure_recovers<example::CrossStreamOrder::kEvents>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EachStep, PlannedStepFailures,
                         testing::Values(Step::kLease, Step::kWait, Step::kLaunch, Step::kGetEvent,
                                         Step::kRecord, Step::kNotify),
                         [](const testing::TestParamInfo<Step> &info) {
                           std::string name = kStepNames[static_cast<int>(info.param)];
                           name.erase(std::remove(name.begin(), name.end(), '_'), name.end());
                           return name;
                         });

// Random graphs of several roots and up to three inputs a task, drawn from anywhere before it: on
// each, both planned stacks keep every planned stream on one pool stream for its whole span, run
// its tasks there in the plan's order, never use a pool stream for two planned streams at once,
// and run every task once after its inputs.
Dag random_graph(std::uint64_t seed, std::size_t tasks) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15u + 1;
  const auto next = [&](std::uint64_t bound) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return bound == 0 ? 0 : state % bound;
  };
  Dag dag;
  for (TaskId id = 0; id < tasks; ++id) {
    std::vector<TaskId> inputs;
    const std::uint64_t count = id == 0 ? 0 : next(4);
    for (std::uint64_t i = 0; i < count; ++i) {
      // Half the inputs among the last few tasks, half from anywhere: long and short edges.
      const TaskId input = next(2) == 0 ? static_cast<TaskId>(id - 1 - next(std::min<TaskId>(id, 4)))
                                        : static_cast<TaskId>(next(id));
      if (std::find(inputs.begin(), inputs.end(), input) == inputs.end()) inputs.push_back(input);
    }
    dag.add(1us, inputs);
  }
  return dag;
}

template <example::CrossStreamOrder kOrder>
void expect_planned_streams_kept_in_order(const Dag &dag, int workers) {
  EvpoolBench bench(dag);
  {
    bench.log.kernel_time = 2us;
    HostPlannedStack<kOrder> stack(bench.gpu, dag, *bench.streams, *bench.events, bench.completions);
    test::CountingStack<HostPlannedStack<kOrder>> counted(stack);
    Executor<test::CountingStack<HostPlannedStack<kOrder>>> executor(counted, dag);
    for (int run = 0; run < 2; ++run) {
      bench.log.runs.assign(dag.size(), 0);
      const RunResult result = executor.run(workers);
      expect_every_task_once_after_its_inputs(dag, bench.log, result, &stack.plan());
    }
    expect_balanced(counted, 2 * dag.size());
    const example::StreamPlan &plan = stack.plan();
    // Per pool stream, the planned streams it ran, in the order of its launches: each planned
    // stream one block, its tasks in increasing ids; a planned stream on one pool stream per run.
    std::vector<std::uint64_t> token_of(plan.streams() * 2, 0);
    std::vector<TaskId> last_task(plan.streams() * 2, 0);
    std::vector<std::size_t> seen(plan.streams() * 2, 0);
    std::unordered_map<std::uint64_t, std::uint32_t> current;  // pool stream -> planned stream (+run)
    std::vector<bool> closed(plan.streams() * 2, false);
    std::size_t launch_index = 0;
    std::string first;
    std::size_t bad = 0;
    for (const test::Launch &launch : stack.launches()) {
      const std::size_t run = launch_index++ / dag.size();
      const std::uint32_t planned =
          static_cast<std::uint32_t>(plan.stream_of(launch.task) + run * plan.streams());
      if (seen[planned]++ == 0) {
        token_of[planned] = launch.stream;
      } else if (token_of[planned] != launch.stream || last_task[planned] >= launch.task) {
        if (bad++ == 0)
          first = "task " + std::to_string(launch.task) + " out of its planned stream's order or pool stream";
      }
      if (closed[planned] && bad++ == 0)
        first = "planned stream reopened at task " + std::to_string(launch.task);
      last_task[planned] = launch.task;
      if (const auto it = current.find(launch.stream); it != current.end() && it->second != planned) {
        if (!closed[it->second] && bad++ == 0)
          first = "pool stream " + std::to_string(launch.stream) + " used by planned stream " +
                  std::to_string(planned) + " while planned stream " + std::to_string(it->second) +
                  " still had tasks to run";
      }
      current[launch.stream] = planned;
      if (plan.last_on(plan.stream_of(launch.task)) == launch.task) closed[planned] = true;
    }
    EXPECT_EQ(bad, 0u) << first;
  }
  bench.expect_all_back();
  expect_backends_even(bench);
}

TEST(PlannedStacksOnRandomGraphs, KeepEachPlannedStreamOnOnePoolStreamForItsSpanInThePlansOrder) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Dag dag = random_graph(seed, 40);
    expect_planned_streams_kept_in_order<example::CrossStreamOrder::kCompletions>(dag, 4);
    expect_planned_streams_kept_in_order<example::CrossStreamOrder::kEvents>(dag, 4);
    if (HasFailure()) break;
  }
}

// A stack that says task 3 follows task 0 on its stream, and decides when callbacks run, on the
// one worker: task 0's and 1's are kept until task 4 notifies, which runs 1's, then 0's. Task 3
// (inputs 0 and 1) is then made ready by 1's callback, its other input having released it at
// enqueue, and runs before task 2 (input 0 alone), which 0's callback makes ready. An executor
// that waited for 0's completion before making 3 ready would run 2 first.
class DeferredCallbackStack {
 public:
  using stream_lease = TaskId;
  using event_type = std::uint64_t;
  using status_type = int;
  static bool succeeded(int status) noexcept { return status == 0; }
  static std::string describe(int status) { return std::to_string(status); }

  stream_lease lease_stream(TaskId task) { return task; }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept {
    return task == 0 && successor == 3;
  }
  void wait(TaskId, std::uint64_t) {}
  void launch(TaskId, TaskId task, std::chrono::nanoseconds) { launched.push_back(task); }
  event_type get_event(TaskId task) { return task + std::uint64_t{1}; }
  void record(event_type &, TaskId) {}
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(TaskId task, F &&done) {
    if (task == 0 || task == 1) {
      kept[task] = std::forward<F>(done);
      return;
    }
    if (task == 4) {
      kept[1](0);
      kept[0](0);
    }
    done(0);
  }
  void finish() {}

  std::vector<TaskId> launched;  // one worker: no lock
  std::function<void(int)> kept[2];
};

TEST(ExecutorReleaseAtEnqueue, ASuccessorThatFollowsItsInputOnItsStreamDoesNotWaitForThatInputsCompletion) {
  Dag dag;
  dag.add(1us);          // 0
  dag.add(1us);          // 1
  dag.add(1us, {0});     // 2
  dag.add(1us, {0, 1});  // 3: follows 0
  dag.add(1us);          // 4
  DeferredCallbackStack stack;
  Executor<DeferredCallbackStack> executor(stack, dag);
  executor.run(1);
  EXPECT_EQ(stack.launched, (std::vector<TaskId>{0, 1, 4, 3, 2}));
}

// A stack whose callbacks run on threads of their own, and whose lease of task 0 holds its worker
// once task 0 is enqueued (after the executor's release at enqueue) until the last task launched;
// task 1's callback runs only once task 0 released task 2 at enqueue. Task 2 (inputs 0, 1, and
// following 0 on its stream) is then pushed by 1's callback, and only the release at enqueue's
// count orders task 0's event, written by 0's worker, before 2's worker reads it. Under
// ThreadSanitizer, a relaxed release at enqueue shows as a race on that event.
class HeldAtEnqueueStack {
 public:
  struct stream_lease {
    stream_lease(HeldAtEnqueueStack *stack, TaskId task) noexcept : stack(stack), task(task) {}
    stream_lease(const stream_lease &) = delete;
    ~stream_lease() {
      if (task != 0) return;
      // Relaxed, as every access of these flags: they must order nothing (see above).
      stack->released_0.store(true, std::memory_order_relaxed);
      while (!stack->last_launched.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
    HeldAtEnqueueStack *stack;
    TaskId task;
  };
  using event_type = std::uint64_t;
  using status_type = int;
  static bool succeeded(int status) noexcept { return status == 0; }
  static std::string describe(int status) { return std::to_string(status); }

  ~HeldAtEnqueueStack() {
    if (callback_1.joinable()) callback_1.join();
  }

  stream_lease lease_stream(TaskId task) { return {this, task}; }
  bool follows_at_enqueue(TaskId task, TaskId successor) const noexcept {
    return task == 0 && successor == 2;
  }
  void wait(const stream_lease &, std::uint64_t event) { waited.fetch_add(event, std::memory_order_relaxed); }
  void launch(const stream_lease &, TaskId task, std::chrono::nanoseconds) {
    if (task == 2) last_launched.store(true, std::memory_order_relaxed);
  }
  event_type get_event(TaskId task) { return task + std::uint64_t{1}; }
  void record(event_type &, const stream_lease &) {}
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(const stream_lease &stream, F &&done) {
    if (stream.task != 1) return done(0);
    callback_1 = std::thread([this, done = std::forward<F>(done)]() mutable {
      while (!released_0.load(std::memory_order_relaxed)) std::this_thread::yield();
      done(0);
    });
    while (!last_launched.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void finish() {}

  std::atomic<std::uint64_t> waited{0};
  std::atomic<bool> released_0{false}, last_launched{false};
  std::thread callback_1;
};

TEST(ExecutorMemoryOrder, TheReleaseAtEnqueueCarriesTheTasksEventToItsSuccessorOnItsStream) {
  Dag dag;
  dag.add(1us);
  dag.add(1us);
  dag.add(1us, {0, 1});
  HeldAtEnqueueStack stack;
  Executor<HeldAtEnqueueStack> executor(stack, dag);
  executor.run(3);
  EXPECT_EQ(stack.waited.load(), 1u + 2u);
}

TEST(ExecutorFailures, TheLimitStackReportsAFailedKernelAtItsSynchronize) {
  const Dag dag = example::independent_chains(2, 10);
  DeviceLog log(dag);
  log.failing = 5;
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack stack(gpu, dag);
  Executor<HostLimitStack> executor(stack, dag);
  try {
    executor.run(2);
    ADD_FAILURE() << "run() returned after a kernel failed";
  } catch (const std::runtime_error &error) {
    EXPECT_STREQ(error.what(), "synchronize: host status 7");
  }
}

TEST(ExecutorFailures, TheFirstErrorIsThrownNotALaterOne) {
  // A launch refused during the run, then the device's failure reported by finish(): the run
  // throws the launch's error, the first.
  const Dag dag = example::independent_chains(2, 10);
  DeviceLog log(dag);
  log.failing = 0;
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack stack(gpu, dag);
  stack.refuse_launch_of(5);
  Executor<HostLimitStack> executor(stack, dag);
  try {
    executor.run(2);
    ADD_FAILURE() << "run() returned after a launch threw";
  } catch (const std::runtime_error &error) {
    EXPECT_STREQ(error.what(), "launch of task 5 refused");
  }
}

// A stack that runs each callback on a thread of its own, and holds the worker that notified
// inside notify() until the graph's last task is launched: so the worker that wrote an input's
// event touches nothing shared again before the successor's worker reads it, and only the
// callbacks' count of inputs_left can order the two (executor.h, memory orders). Under
// ThreadSanitizer, a count without acquire and release shows as a race on the event.
class ThreadPerCallbackStack {
 public:
  using stream_lease = int;
  using event_type = std::uint64_t;
  using status_type = int;
  static bool succeeded(int status) noexcept { return status == 0; }
  static std::string describe(int status) { return std::to_string(status); }

  explicit ThreadPerCallbackStack(const Dag &dag)
      : last_(static_cast<TaskId>(dag.size() - 1)), threads_(dag.size()) {}
  ~ThreadPerCallbackStack() {
    for (std::thread &thread : threads_)
      if (thread.joinable()) thread.join();
  }

  stream_lease lease_stream(TaskId) { return 0; }
  // Relaxed, as every access of it: what was waited on, kept so that the executor's read of the
  // event is not optimised away (ThreadSanitizer sees only the reads that remain).
  void wait(int, std::uint64_t event) { waited.fetch_add(event, std::memory_order_relaxed); }
  void launch(int, TaskId task, std::chrono::nanoseconds) {
    launching = task;
    // Relaxed, as every access of it: a flag that must not order anything (see above).
    if (task == last_) last_launched_.store(true, std::memory_order_relaxed);
  }
  event_type get_event(TaskId task) { return task + std::uint64_t{1}; }
  void record(event_type &, int) {}
  void put_event(event_type &&) noexcept {}
  template <class F>
  void notify(int, F &&done) {
    threads_[launching] = std::thread([done = std::forward<F>(done)]() mutable { done(0); });
    while (!last_launched_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void finish() {}

  std::atomic<std::uint64_t> waited{0};  // the sum of the events waited on

 private:
  static inline thread_local TaskId launching = 0;  // from launch() to notify(), on one worker
  const TaskId last_;
  std::vector<std::thread> threads_;  // by task: each written by the one worker that runs it
  std::atomic<bool> last_launched_{false};
};

TEST(ExecutorMemoryOrder, TheLastInputsCallbackCarriesTheOtherInputsEventsToTheSuccessor) {
  Dag dag;
  dag.add(1us);
  dag.add(1us);
  dag.add(1us, {0, 1});
  ThreadPerCallbackStack stack(dag);
  Executor<ThreadPerCallbackStack> executor(stack, dag);
  // Three workers: the two that run the inputs are held in notify() until the third launches the
  // successor.
  const RunResult result = executor.run(3);
  EXPECT_LE(result.tasks[0].seen, result.tasks[2].ready);
  EXPECT_LE(result.tasks[1].seen, result.tasks[2].ready);
  EXPECT_EQ(stack.waited.load(), 1u + 2u) << "the successor did not wait on both inputs' events";
}

// The other way round: two successors of one task, run by two workers that nothing else orders
// (the ready queue's mutex orders their pops, not what each does after), each read the task's
// event before it counts down uses_left; the one that reaches zero then takes the event. Only the
// count orders the other's read before that write (executor.h, memory orders).
TEST(ExecutorMemoryOrder, TheLastSuccessorToWaitTakesTheEventAfterTheOthersRead) {
  Dag dag;
  dag.add(1us);
  dag.add(1us, {0});
  dag.add(1us, {0});
  ThreadPerCallbackStack stack(dag);
  Executor<ThreadPerCallbackStack> executor(stack, dag);
  // Three workers: the input's worker and the first successor's are held in notify() until the
  // second successor launches, so each successor has a worker of its own.
  const RunResult result = executor.run(3);
  EXPECT_LE(result.tasks[0].seen, result.tasks[1].ready);
  EXPECT_LE(result.tasks[0].seen, result.tasks[2].ready);
  EXPECT_EQ(stack.waited.load(), 1u + 1u) << "a successor did not wait on the input's event";
}

TEST(ExecutorInput, FewerThanOneWorkerIsRefusedBeforeAnythingRuns) {
  const Dag dag = example::independent_chains(2, 3);
  DeviceLog log(dag);
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack stack(gpu, dag);
  Executor<HostLimitStack> executor(stack, dag);
  for (const int workers : {0, -3}) {
    try {
      executor.run(workers);
      ADD_FAILURE() << "run(" << workers << ") returned";
    } catch (const std::invalid_argument &error) {
      EXPECT_EQ(std::string(error.what()),
                "Executor::run: workers is " + std::to_string(workers) + "; it must be at least 1");
    }
  }
  EXPECT_EQ(gpu.pending(), 0u);
  EXPECT_EQ(gpu.streams(), 0u) << "something was enqueued";
  const RunResult result = executor.run(2);
  expect_every_task_once_after_its_inputs(dag, log, result);
}

TEST(ExecutorInput, AnEmptyGraphRunsAtOnce) {
  const Dag dag;
  DeviceLog log(dag);
  SimulatedGpu gpu([&](std::uint32_t task) { return log.run(task); });
  HostLimitStack stack(gpu, dag);
  Executor<HostLimitStack> executor(stack, dag);
  EXPECT_TRUE(executor.run(3).tasks.empty());
}

}  // namespace
}  // namespace evpool
