// evpool bench: the example scheduler (examples/scheduler/) on a real GPU, the same executor on
// each of its nine stacks, against the graph captured once and replayed. Usage:
//   evpool_scheduler_bench [--workloads fan-out,mixed,chains] [--threads 1,16,128] [--runs 3]
//                          [--stacks evpool,evpool-planned,evpool-ahead,dali,dali-exec,pytorch,tensorflow,tensorflow-exec,limit,graph]
//                          [--scale F]
// Exits 77 without a GPU, 2 on a bad argument (naming it).
//
// Workloads (examples/scheduler/workloads.h), on device 0:
//   fan-out  200 layers of 256 tasks of 2 us, each needing 2 tasks of the layer before (51,200
//            tasks): launch-bound, the GPU finishes work faster than the host enqueues it
//   mixed    10,000 tasks of 2 us to 2 ms (log-uniform), 1 to 4 inputs each among the 256 before
//   chains   one chain of 2 us tasks per worker thread, 25,600 tasks in all (at least 100 a chain)
// --scale multiplies the task counts (the smoke test runs a sliver).
//
// Method. For each workload and thread count, every stack is made (outside the timing: the limit
// stack creates its streams and events there, the graph is captured and instantiated there) and
// run once untimed, which also fills the pools. Then --runs rounds, each running every stack once
// in turn, so that a drift of the machine over the rounds touches every stack alike; each figure
// printed is the median over the rounds. The kernels are unchecked (task_kernel.h): no counters.
//
// One line per workload, thread count and stack:
//   scheduler workload=<w> threads=<n> stack=<s> tasks=<n> tasks_per_s=<median> runs=<a/b/c>
//     p50_us=<x|na> p99_us=<x|na> cores=<x> streams_created=<n|na> events_created=<n|na>
// - tasks_per_s: the graph's tasks over the run's wall time (Executor::run: from the first task
//   made ready to the stack's finish(); the graph: one cudaGraphLaunch and its synchronisation).
// - p50_us, p99_us: over every task of the run, from the moment it joined the ready queue to the
//   moment its completion callback began (TaskTimes). na for the graph, which has no such moment,
//   and for the stacks whose "completion" is only the end of the enqueue (dali, dali-exec,
//   tensorflow-exec, limit: enqueued_completions.h).
// - cores: the whole process's CPU time (CLOCK_PROCESS_CPUTIME_ID) over the wall time of the same
//   window, the call of Executor::run (or of the replay): workers, the completion mechanism's
//   threads and the driver's threads together.
// - streams_created, events_created: what the stack had created after all its runs (Created,
//   stack.h): the completion mechanism's events included. na for the graph.
#include <cuda_runtime_api.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

namespace evpool::bench {
namespace {

using namespace std::chrono_literals;
using example::Dag;
using example::TaskKernel;

const std::vector<std::string> kWorkloads = {"fan-out", "mixed", "chains"};
const std::vector<std::string> kStacks = {
    "evpool",  "evpool-planned", "evpool-ahead",    "dali",  "dali-exec",
    "pytorch", "tensorflow",     "tensorflow-exec", "limit", "graph",
};

struct Options {
  std::vector<std::string> workloads = kWorkloads;
  std::vector<int> threads = {1, 16, 128};
  std::vector<std::string> stacks = kStacks;
  int runs = 3;
  double scale = 1.0;
};

[[noreturn]] void usage_error(const std::string &what) {
  std::fprintf(stderr, "evpool_scheduler_bench: %s\n", what.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string &list) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) parts.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

std::vector<std::string> names_of(const std::string &flag, const std::string &list,
                                  const std::vector<std::string> &known) {
  std::vector<std::string> names = split(list);
  if (names.empty()) usage_error(flag + " is empty");
  for (const std::string &name : names)
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string choices;
      for (const std::string &choice : known) choices += (choices.empty() ? "" : ",") + choice;
      usage_error(flag + ": unknown name '" + name + "' (known: " + choices + ")");
    }
  return names;
}

double number_of(const std::string &flag, const std::string &text, double least, double most) {
  char *end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= least && value <= most)) {
    char range[64];
    std::snprintf(range, sizeof range, "from %g to %g", least, most);
    usage_error(flag + ": '" + text + "' is not a number " + range);
  }
  return value;
}

// A whole number: "1.5" or "0x10" is refused rather than read as 1 or 16.
int integer_of(const std::string &flag, const std::string &text, long least, long most) {
  char *end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < least || value > most)
    usage_error(flag + ": '" + text + "' is not a whole number from " + std::to_string(least) + " to " +
                std::to_string(most));
  return static_cast<int>(value);
}

Options parse(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--workloads") {
      options.workloads = names_of(flag, value, kWorkloads);
    } else if (flag == "--stacks") {
      options.stacks = names_of(flag, value, kStacks);
    } else if (flag == "--threads") {
      options.threads.clear();
      for (const std::string &part : split(value)) options.threads.push_back(integer_of(flag, part, 1, 4096));
      if (options.threads.empty()) usage_error("--threads is empty");
    } else if (flag == "--runs") {
      options.runs = integer_of(flag, value, 1, 100);
    } else if (flag == "--scale") {
      options.scale = number_of(flag, value, 1e-4, 100);
    } else {
      usage_error("unknown option '" + flag + "' (options: --workloads, --threads, --stacks, --runs, --scale)");
    }
  }
  return options;
}

std::size_t scaled(std::size_t count, double scale) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(count) * scale));
}

Dag make_workload(const std::string &name, int threads, double scale) {
  if (name == "fan-out") return example::fan_out_fan_in(scaled(200, scale), 256, 2us);
  if (name == "mixed") {
    example::MixedRandomOptions options;
    options.tasks = scaled(10'000, scale);
    return example::mixed_random(options);
  }
  const auto chains = static_cast<std::size_t>(threads);
  return example::independent_chains(chains, std::max(scaled(100, scale), scaled(25'600, scale) / chains), 2us);
}

std::chrono::nanoseconds process_cpu_time() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

// One run's figures.
struct Run {
  double tasks_per_s = 0;
  std::optional<double> p50_us, p99_us;
  double cores = 0;
};

double percentile(std::vector<double> values, double p) {
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

// Of an even count, the mean of the middle two: percentile()'s lower one would be the slowest of
// two rounds' rates but the better of their latencies.
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;
  return values.size() % 2 != 0 ? values[half] : (values[half - 1] + values[half]) / 2;
}

// A stack (or the graph) made for one workload and thread count, and how to run it once.
struct Contender {
  std::string name;
  std::function<Run()> run;
  std::function<std::optional<example::Created>()> created;
  std::vector<Run> runs;
};

// What every stack keeps alive between its runs: the stack, and for evpool its own pools, so that
// their figures are this point's alone.
template <class Stack>
struct StackHolder {
  CUDAStreamPool streams;
  CUDAEventPool events;
  std::unique_ptr<Stack> stack;
  std::unique_ptr<example::Executor<Stack>> executor;
};

template <class Stack>
Contender make_stack_contender(const std::string &name, const TaskKernel &kernel, const Dag &dag, int threads,
                               bool report_latency) {
  auto holder = std::make_shared<StackHolder<Stack>>();
  if constexpr (std::is_same_v<Stack, example::EvpoolStack>)
    holder->stack = std::make_unique<Stack>(kernel, holder->streams, holder->events);
  else if constexpr (std::is_same_v<Stack, example::EvpoolPlannedStack> ||
                     std::is_same_v<Stack, example::EvpoolAheadStack>)
    holder->stack = std::make_unique<Stack>(kernel, dag, holder->streams, holder->events);
  else if constexpr (std::is_same_v<Stack, example::LimitStack>)
    holder->stack = std::make_unique<Stack>(kernel, dag);
  else
    holder->stack = std::make_unique<Stack>(kernel);
  holder->executor = std::make_unique<example::Executor<Stack>>(*holder->stack, dag);
  Contender contender{name, {}, {}, {}};
  contender.run = [holder, threads, report_latency, &dag] {
    // The CPU time and the wall time of cores over the same window: result.wall leaves out what
    // run() does before the first task is ready (the tasks' state, zeroed), whose CPU time the
    // window counts.
    const auto cpu_before = process_cpu_time();
    const auto start = std::chrono::steady_clock::now();
    const example::RunResult result = holder->executor->run(threads);
    const double window = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto cpu = process_cpu_time() - cpu_before;
    const double seconds = std::chrono::duration<double>(result.wall).count();
    Run run;
    run.tasks_per_s = static_cast<double>(dag.size()) / seconds;
    run.cores = std::chrono::duration<double>(cpu).count() / window;
    if (report_latency) {
      std::vector<double> latency_us;
      latency_us.reserve(result.tasks.size());
      for (const example::TaskTimes &times : result.tasks)
        latency_us.push_back(std::chrono::duration<double, std::micro>(times.seen - times.ready).count());
      run.p50_us = percentile(latency_us, 0.5);
      run.p99_us = percentile(std::move(latency_us), 0.99);
    }
    return run;
  };
  contender.created = [holder]() -> std::optional<example::Created> { return holder->stack->created(); };
  return contender;
}

Contender make_graph_contender(const TaskKernel &kernel, const Dag &dag) {
  auto graph = std::make_shared<example::GraphReplay>(kernel, dag);
  Contender contender{"graph", {}, {}, {}};
  contender.run = [graph, &dag] {
    const auto cpu_before = process_cpu_time();
    const auto start = std::chrono::steady_clock::now();
    graph->replay();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Run run;
    run.tasks_per_s = static_cast<double>(dag.size()) / seconds;
    run.cores = std::chrono::duration<double>(process_cpu_time() - cpu_before).count() / seconds;
    return run;
  };
  contender.created = [] { return std::optional<example::Created>(); };
  return contender;
}

// The stacks whose tasks are complete once enqueued (enqueued_completions.h) report no latency.
Contender make_contender(const std::string &name, const TaskKernel &kernel, const Dag &dag, int threads) {
  if (name == "evpool") return make_stack_contender<example::EvpoolStack>(name, kernel, dag, threads, true);
  if (name == "evpool-planned")
    return make_stack_contender<example::EvpoolPlannedStack>(name, kernel, dag, threads, false);
  if (name == "evpool-ahead")
    return make_stack_contender<example::EvpoolAheadStack>(name, kernel, dag, threads, false);
  if (name == "dali") return make_stack_contender<example::DaliStack>(name, kernel, dag, threads, false);
  if (name == "dali-exec")
    return make_stack_contender<example::DaliExecStack>(name, kernel, dag, threads, false);
  if (name == "pytorch") return make_stack_contender<example::PytorchStack>(name, kernel, dag, threads, true);
  if (name == "tensorflow")
    return make_stack_contender<example::TensorflowStack>(name, kernel, dag, threads, true);
  if (name == "tensorflow-exec")
    return make_stack_contender<example::TensorflowExecStack>(name, kernel, dag, threads, false);
  if (name == "limit") return make_stack_contender<example::LimitStack>(name, kernel, dag, threads, false);
  return make_graph_contender(kernel, dag);
}

std::string figure(const std::optional<double> &value, const char *format) {
  if (!value) return "na";
  char text[32];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

std::optional<double> median_of(const std::vector<Run> &runs, std::optional<double> Run::*field) {
  std::vector<double> values;
  for (const Run &run : runs)
    if (run.*field) values.push_back(*(run.*field));
  if (values.empty()) return std::nullopt;
  return median(std::move(values));
}

void report(const std::string &workload, int threads, std::size_t tasks, const Contender &contender) {
  std::vector<double> rates, cores;
  std::string runs;
  for (const Run &run : contender.runs) {
    rates.push_back(run.tasks_per_s);
    cores.push_back(run.cores);
    runs += (runs.empty() ? "" : "/") + figure(run.tasks_per_s, "%.0f");
  }
  const std::optional<example::Created> created = contender.created();
  std::printf("scheduler workload=%s threads=%d stack=%s tasks=%zu tasks_per_s=%.0f runs=%s p50_us=%s p99_us=%s cores=%.2f "
              "streams_created=%s events_created=%s\n",
              workload.c_str(), threads, contender.name.c_str(), tasks, median(rates), runs.c_str(),
              figure(median_of(contender.runs, &Run::p50_us), "%.1f").c_str(),
              figure(median_of(contender.runs, &Run::p99_us), "%.1f").c_str(), median(cores),
              created ? std::to_string(created->streams).c_str() : "na",
              created ? std::to_string(created->events).c_str() : "na");
  std::fflush(stdout);
}

void run_point(const Options &options, const std::string &workload, int threads) {
  const Dag dag = make_workload(workload, threads, options.scale);
  const TaskKernel kernel;
  std::vector<Contender> contenders;
  for (const std::string &name : options.stacks) {
    contenders.push_back(make_contender(name, kernel, dag, threads));
    (void)contenders.back().run();  // untimed: the pools fill, the code and the driver warm up
  }
  for (int round = 0; round < options.runs; ++round)
    for (Contender &contender : contenders) contender.runs.push_back(contender.run());
  for (const Contender &contender : contenders) report(workload, threads, dag.size(), contender);
}

}  // namespace
}  // namespace evpool::bench

int main(int argc, char **argv) {
  using namespace evpool::bench;
  const Options options = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("scheduler bench skipped: no GPU\n");
    return 77;
  }
  try {
    if (const cudaError_t error = cudaSetDevice(evpool::example::CudaSteps::kDevice); error != cudaSuccess)
      throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorName(error));
    cudaDeviceProp properties{};
    if (const cudaError_t error = cudaGetDeviceProperties(&properties, 0); error != cudaSuccess)
      throw std::runtime_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorName(error));
    std::printf("# %s, %ld CPUs online, %d runs per point, scale %g\n", properties.name,
                sysconf(_SC_NPROCESSORS_ONLN), options.runs, options.scale);
    for (const std::string &workload : options.workloads)
      for (const int threads : options.threads) run_point(options, workload, threads);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "evpool_scheduler_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}
