// The example scheduler (examples/scheduler/) on a real GPU, on each of its nine stacks: evpool's
// three (evpool, evpool-planned, evpool-ahead), DALI's pools and DALI's executor, PyTorch-style,
// TensorFlow's pieces and TensorFlow's executor, and the limit. For each, on each workload, with 1
// and 16 workers, twice over with the same executor and stack: the checked task kernel
// (task_kernel.h) says that every task's kernel ran once and never began before one of its inputs'
// kernels had finished; the executor's times say that every task was made ready only after its
// inputs' completions were seen (a planned stack's successor on its input's stream: after its
// enqueue); and nothing leaks:
// the executor handed back every lease and event it took and heard every completion it asked for
// once (support/counting_stack.h), and evpool's pools have every stream and event back. And the
// reference, the graph captured once and replayed: each replay runs every kernel once more, none
// before its inputs. Each skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_availability.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "scheduler/dag.h"
#include "scheduler/dali_exec_stack.h"
#include "scheduler/dali_stack.h"
#include "scheduler/evpool_planned_stack.h"
#include "scheduler/evpool_stack.h"
#include "scheduler/executor.h"
#include "scheduler/graph_replay.h"
#include "scheduler/limit_stack.h"
#include "scheduler/pytorch_stack.h"
#include "scheduler/task_kernel.h"
#include "scheduler/tensorflow_exec_stack.h"
#include "scheduler/tensorflow_stack.h"
#include "scheduler/workloads.h"
#include "support/counting_stack.h"

namespace evpool {
namespace {

using namespace std::chrono_literals;
using example::Dag;
using example::Executor;
using example::RunResult;
using example::TaskId;
using example::TaskKernel;

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

// evpool's pools, the test's own, so that their figures are the run's alone.
struct EvpoolPools {
  CUDAStreamPool streams;
  CUDAEventPool events;
};

template <class Stack>
std::unique_ptr<Stack> make_stack(const TaskKernel &kernel, const Dag &dag, EvpoolPools &pools) {
  if constexpr (std::is_same_v<Stack, example::EvpoolStack>)
    return std::make_unique<Stack>(kernel, pools.streams, pools.events);
  else if constexpr (std::is_same_v<Stack, example::EvpoolPlannedStack> ||
                     std::is_same_v<Stack, example::EvpoolAheadStack>)
    return std::make_unique<Stack>(kernel, dag, pools.streams, pools.events);
  else if constexpr (std::is_same_v<Stack, example::LimitStack>)
    return std::make_unique<Stack>(kernel, dag);
  else
    return std::make_unique<Stack>(kernel);
}

// Whether the stack makes `successor` ready at `task`'s enqueue (stack.h); only a planned stack does.
template <class Stack>
bool follows_at_enqueue(const Stack &stack, TaskId task, TaskId successor) {
  if constexpr (requires { stack.follows_at_enqueue(task, successor); })
    return stack.follows_at_enqueue(task, successor);
  else
    return false;
}

struct Workload {
  const char *name;
  Dag (*make)();
};

const Workload kWorkloads[] = {
    {"fan-out/fan-in", [] { return example::fan_out_fan_in(8, 64); }},
    {"mixed random",
     [] {
       example::MixedRandomOptions options;
       options.tasks = 400;
       options.longest = 200us;
       options.window = 64;
       return example::mixed_random(options);
     }},
    {"independent chains", [] { return example::independent_chains(16, 20, 20us); }},
};

template <class Stack>
class SchedulerOnGpu : public testing::Test {
 protected:
  void SetUp() override {
    EVPOOL_REQUIRE_GPU();
    ASSERT_CUDA(cudaSetDevice(example::CudaSteps::kDevice));
  }
};

struct StackNames {
  template <class Stack>
  static std::string GetName(int) {
    if (std::is_same_v<Stack, example::EvpoolStack>) return "Evpool";
    if (std::is_same_v<Stack, example::EvpoolPlannedStack>) return "EvpoolPlanned";
    if (std::is_same_v<Stack, example::EvpoolAheadStack>) return "EvpoolAhead";
    if (std::is_same_v<Stack, example::DaliStack>) return "Dali";
    if (std::is_same_v<Stack, example::DaliExecStack>) return "DaliExec";
    if (std::is_same_v<Stack, example::PytorchStack>) return "Pytorch";
    if (std::is_same_v<Stack, example::TensorflowStack>) return "Tensorflow";
    if (std::is_same_v<Stack, example::TensorflowExecStack>) return "TensorflowExec";
    return "Limit";
  }
};

using Stacks = testing::Types<example::EvpoolStack, example::EvpoolPlannedStack, example::EvpoolAheadStack,
                              example::DaliStack, example::DaliExecStack, example::PytorchStack,
                              example::TensorflowStack, example::TensorflowExecStack, example::LimitStack>;
TYPED_TEST_SUITE(SchedulerOnGpu, Stacks, StackNames);

TYPED_TEST(SchedulerOnGpu, EveryTaskRunsOnceAfterItsInputsAndNothingLeaks) {
  using Stack = TypeParam;
  using Counted = test::CountingStack<Stack>;
  for (const Workload &workload : kWorkloads) {
    for (const int workers : {1, 16}) {
      SCOPED_TRACE(std::string(workload.name) + ", " + std::to_string(workers) + " workers");
      const Dag dag = workload.make();
      TaskKernel kernel(&dag);
      EvpoolPools pools;
      {
        const std::unique_ptr<Stack> stack = make_stack<Stack>(kernel, dag, pools);
        Counted counted(*stack);
        Executor<Counted> executor(counted, dag);
        for (int round = 0; round < 2; ++round) {
          SCOPED_TRACE("round " + std::to_string(round));
          ASSERT_NO_THROW(kernel.reset_check());
          const RunResult result = executor.run(workers);
          ASSERT_CUDA(cudaDeviceSynchronize());
          const TaskKernel::Check check = kernel.read_check();
          EXPECT_EQ(check.violations, 0u) << "kernels began before an input's kernel had finished";
          std::size_t not_once = 0, ready_early = 0;
          for (TaskId task = 0; task < dag.size(); ++task) {
            not_once += check.runs[task] != 1;
            for (const TaskId input : dag.inputs(task))
              // A successor on its input's planned stream is ready at the input's enqueue (stack.h).
              ready_early += !follows_at_enqueue(*stack, input, task) &&
                             result.tasks[task].ready < result.tasks[input].seen;
          }
          EXPECT_EQ(not_once, 0u) << "tasks whose kernel did not run exactly once";
          EXPECT_EQ(ready_early, 0u) << "tasks made ready before an input's completion was seen";

          const auto &counts = counted.counts();
          EXPECT_EQ(counts.leases.load(), counts.leases_ended.load());
          EXPECT_EQ(counts.events.load(), counts.events_back.load());
          EXPECT_EQ(counts.notifies.load(), (round + 1) * dag.size());
          EXPECT_EQ(counts.callbacks.load(), counts.notifies.load());
        }
      }
      if constexpr (std::is_same_v<Stack, example::EvpoolStack> ||
                    std::is_same_v<Stack, example::EvpoolPlannedStack> ||
                    std::is_same_v<Stack, example::EvpoolAheadStack>) {
        // The stack's queue is gone: it gave back the events of the last requests.
        EXPECT_EQ(pools.streams.stats().total().outstanding, 0) << "streams not handed back";
        EXPECT_EQ(pools.events.stats().total().outstanding, 0) << "events not handed back";
      }
    }
  }
}

TEST(GraphReplayOnGpu, EachReplayRunsEveryTaskOnceAfterItsInputs) {
  EVPOOL_REQUIRE_GPU();
  ASSERT_CUDA(cudaSetDevice(example::CudaSteps::kDevice));
  for (const Workload &workload : kWorkloads) {
    SCOPED_TRACE(workload.name);
    const Dag dag = workload.make();
    TaskKernel kernel(&dag);
    example::GraphReplay graph(kernel, dag);
    for (std::uint32_t replays = 1; replays <= 2; ++replays) {
      graph.replay();
      const TaskKernel::Check check = kernel.read_check();
      EXPECT_EQ(check.violations, 0u) << "kernels began before an input's kernel had finished";
      EXPECT_EQ(std::count(check.runs.begin(), check.runs.end(), replays), static_cast<std::ptrdiff_t>(dag.size()))
          << "tasks whose kernel did not run once a replay";
    }
  }
}

}  // namespace
}  // namespace evpool
