// evpool bench: the example scheduler's stacks on a model of the host, the driver and the GPU, in
// virtual time (bench/scheduler_model/), against what a GPU measured. Needs no GPU. Usage:
//   evpool_scheduler_model [--measured bench/results/h100/verdict/scheduler-run.txt]
//                          [--workloads fan-out,mixed,chains] [--threads 1,16,128] [--scale F]
// Exits 2 on a bad argument (naming it), 1 if the measured file cannot be read.
//
// Prints markdown: the modelled thousand tasks per second per workload, thread count and stack,
// in the layout of bench/results/<host>/verdict/scheduler-tables.md (a design modelled before it
// is built would be marked "not built"); then, given the GPU's run (the benchmark's output,
// scheduler-run.txt), the ranking check: per workload and thread count, the best other stack (the
// fastest that is neither evpool's nor the limit or the graph, as tools/scheduler_results.py
// picks it), measured and modelled; each evpool stack over that best in both, and whether it is
// on the same side of it; the fastest evpool stack in both; and Spearman's rank correlation over
// the measured stacks, per point and per workload over every thread count. The workloads are
// bench/scheduler_bench.cc's, built the same way.
//
// Calibration: bench/scheduler_model/calibration.h, from micro-benchmarks only; nothing is fitted
// to the scheduler run it is checked against.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/dag.h"
#include "scheduler/workloads.h"
#include "scheduler_model/ranking.h"
#include "scheduler_model/scheduler_run.h"
#include "scheduler_model/stack_kinds.h"

namespace evpool::bench {
namespace {

using namespace std::chrono_literals;
using example::Dag;

const std::vector<std::string> kWorkloads = {"fan-out", "mixed", "chains"};
// The best "other" excludes these and evpool's own, as tools/scheduler_results.py does.
const std::vector<std::string> kReferences = {"limit", "graph"};
const std::vector<std::string> kEvpoolStacks = {"evpool", "evpool-planned", "evpool-ahead"};

struct Options {
  std::vector<std::string> workloads = kWorkloads;
  std::vector<int> threads = {1, 16, 128};
  double scale = 1.0;
  std::string measured;
};

[[noreturn]] void usage_error(const std::string &what) {
  std::fprintf(stderr, "evpool_scheduler_model: %s\n", what.c_str());
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

Options parse(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--workloads") {
      options.workloads = split(value);
      for (const std::string &name : options.workloads)
        if (std::find(kWorkloads.begin(), kWorkloads.end(), name) == kWorkloads.end())
          usage_error("--workloads: unknown name '" + name + "' (known: fan-out,mixed,chains)");
      if (options.workloads.empty()) usage_error("--workloads is empty");
    } else if (flag == "--threads") {
      options.threads.clear();
      for (const std::string &part : split(value)) {
        char *end = nullptr;
        errno = 0;
        const long threads = std::strtol(part.c_str(), &end, 10);
        if (*end != '\0' || errno == ERANGE || threads < 1 || threads > 4096)
          usage_error("--threads: '" + part + "' is not a whole number from 1 to 4096");
        options.threads.push_back(static_cast<int>(threads));
      }
      if (options.threads.empty()) usage_error("--threads is empty");
    } else if (flag == "--scale") {
      char *end = nullptr;
      options.scale = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(options.scale >= 1e-4 && options.scale <= 100))
        usage_error("--scale: '" + value + "' is not a number from 0.0001 to 100");
    } else if (flag == "--measured") {
      options.measured = value;
    } else {
      usage_error("unknown option '" + flag + "' (options: --measured, --workloads, --threads, --scale)");
    }
  }
  return options;
}

std::size_t scaled(std::size_t count, double scale) {
  return std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(count) * scale));
}

// As bench/scheduler_bench.cc's make_workload.
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

std::string thousands(double tasks_per_s) {
  const double k = tasks_per_s / 1000;
  char text[32];
  std::snprintf(text, sizeof text, k >= 100 ? "%.0f" : k >= 10 ? "%.1f" : "%.2f", k);
  std::string digits = text;
  const std::size_t point = std::min(digits.find('.'), digits.size());
  for (std::size_t at = point; at > 3; at -= 3) digits.insert(at - 3, ",");
  return digits;
}

std::string fixed(double value, const char *format) {
  if (std::isnan(value)) return "na";
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::vector<std::string> measured_stack_names() {
  std::vector<std::string> names;
  for (const model::StackName &stack : model::kStackNames)
    if (stack.measured) names.emplace_back(stack.name);
  return names;
}

bool contains(const std::vector<std::string> &list, const std::string &name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

std::vector<std::string> others(const std::vector<std::string> &stacks) {
  std::vector<std::string> rest;
  for (const std::string &stack : stacks)
    if (!contains(kReferences, stack) && !contains(kEvpoolStacks, stack)) rest.push_back(stack);
  return rest;
}

std::string best_named(const std::vector<std::string> &stacks, const model::Rates &rates,
                       const std::string &workload, int threads) {
  const auto rate = [&](const std::string &stack) { return rates.at({workload, threads, stack}); };
  const auto [best, sharing] = model::best_of(stacks, rate);
  if (sharing == 1) return best;
  std::string tied;
  for (const std::string &stack : stacks)
    if (rate(stack) == rate(best)) tied += (tied.empty() ? "" : " = ") + stack;
  return "tie: " + tied;
}

int run(const Options &options) {
  const std::vector<std::string> measured_names = measured_stack_names();
  model::Rates modelled;
  std::printf("# The example scheduler on the model (bench/scheduler_model/)\n\n");
  std::printf("Written by evpool_scheduler_model. Modelled, not measured: virtual time on a model of the host "
              "(%d cores), the driver's lock and the GPU (%d hardware queues), calibrated from micro-benchmarks "
              "only (bench/scheduler_model/calibration.h).\n",
              model::Calibration{}.cores, model::Calibration{}.connections);
  for (const std::string &workload : options.workloads) {
    std::printf("\n## %s\n\nk tasks per second, modelled:\n\n| threads |", workload.c_str());
    for (const model::StackName &stack : model::kStackNames)
      std::printf(" %s%s |", std::string(stack.name).c_str(), stack.measured ? "" : " (not built)");
    std::printf("\n|---:|");
    for (std::size_t i = 0; i < model::kStackNames.size(); ++i) std::printf("---:|");
    std::printf("\n");
    std::vector<std::string> cores_rows;
    for (const int threads : options.threads) {
      const Dag dag = make_workload(workload, threads, options.scale);
      std::printf("| %d |", threads);
      std::string cores_row = "| " + std::to_string(threads) + " |";
      for (const model::StackName &stack : model::kStackNames) {
        const model::ModelResult result = model::model_run(dag, stack.kind, threads);
        modelled[{workload, threads, std::string(stack.name)}] = result.tasks_per_s;
        std::printf(" %s |", thousands(result.tasks_per_s).c_str());
        cores_row += " " + fixed(result.cores, "%.2f") + " |";
      }
      std::printf("\n");
      std::fflush(stdout);
      cores_rows.push_back(cores_row);
    }
    std::printf("\nhost cores used, modelled (threads' time on a core over the wall time):\n\n| threads |");
    for (const model::StackName &stack : model::kStackNames)
      std::printf(" %s |", std::string(stack.name).c_str());
    std::printf("\n|---:|");
    for (std::size_t i = 0; i < model::kStackNames.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (const std::string &row : cores_rows) std::printf("%s\n", row.c_str());
  }
  if (options.measured.empty()) return 0;

  std::ifstream file(options.measured);
  if (!file) {
    std::fprintf(stderr, "evpool_scheduler_model: cannot read --measured file '%s'\n", options.measured.c_str());
    return 1;
  }
  const model::Rates measured = model::parse_scheduler_run(file);
  std::printf(
      "\n## Against the GPU\n\nMeasured: %s. Best other: the fastest stack that is neither evpool's nor the "
      "limit or the graph (tools/scheduler_results.py); each evpool stack's cell: its tasks per second over the "
      "best other's, GPU / model, and whether it is on the same side of 1 in both; best evpool: the fastest of "
      "evpool's stacks; Spearman: rank correlation of modelled and measured tasks per second over the %zu "
      "measured stacks.\n\n",
      options.measured.c_str(), measured_names.size());
  std::vector<std::string> ours;
  for (const std::string &stack : kEvpoolStacks)
    if (contains(measured_names, stack)) ours.push_back(stack);
  std::printf("| workload | threads | best other, GPU | best other, model | same |");
  for (const std::string &stack : ours) std::printf(" %s / best other, GPU / model |", stack.c_str());
  std::printf(" best evpool, GPU / model | Spearman |\n|---|---:|---|---|---|");
  for (std::size_t i = 0; i < ours.size(); ++i) std::printf("---|");
  std::printf("---|---:|\n");
  int points = 0, same_best = 0, same_best_ours = 0;
  std::vector<int> same_side(ours.size(), 0);
  for (const std::string &workload : options.workloads) {
    std::vector<double> all_measured, all_modelled;
    for (const int threads : options.threads) {
      bool complete = true;
      for (const std::string &stack : measured_names)
        complete = complete && measured.count({workload, threads, stack});
      if (!complete) {
        std::printf("| %s | %d | not measured | | |", workload.c_str(), threads);
        for (std::size_t i = 0; i < ours.size(); ++i) std::printf(" |");
        std::printf(" | |\n");
        continue;
      }
      std::vector<double> gpu, mine;
      for (const std::string &stack : measured_names) {
        gpu.push_back(measured.at({workload, threads, stack}));
        mine.push_back(modelled.at({workload, threads, stack}));
      }
      all_measured.insert(all_measured.end(), gpu.begin(), gpu.end());
      all_modelled.insert(all_modelled.end(), mine.begin(), mine.end());
      const std::vector<std::string> candidates = others(measured_names);
      const std::string gpu_best = best_named(candidates, measured, workload, threads);
      const std::string model_best = best_named(candidates, modelled, workload, threads);
      const bool best_agrees = gpu_best == model_best || (model_best.rfind("tie: ", 0) == 0 &&
                                                          model_best.find(gpu_best) != std::string::npos);
      ++points;
      same_best += best_agrees;
      std::printf("| %s | %d | %s | %s | %s |", workload.c_str(), threads, gpu_best.c_str(), model_best.c_str(),
                  best_agrees ? (model_best.rfind("tie", 0) == 0 ? "in a tie" : "yes") : "no");
      // Against the first of a tie: tied stacks have one rate.
      const auto ratio = [&](const model::Rates &rates, const std::string &stack) {
        const auto rate = [&](const std::string &name) { return rates.at({workload, threads, name}); };
        return rate(stack) / rate(model::best_of(candidates, rate).first);
      };
      for (std::size_t i = 0; i < ours.size(); ++i) {
        const double on_gpu = ratio(measured, ours[i]), in_model = ratio(modelled, ours[i]);
        const bool same = (on_gpu >= 1) == (in_model >= 1);
        same_side[i] += same;
        std::printf(" %sx / %sx%s |", fixed(on_gpu, "%.2f").c_str(), fixed(in_model, "%.2f").c_str(),
                    same ? "" : ", sides differ");
      }
      const std::string gpu_ours = best_named(ours, measured, workload, threads);
      const std::string model_ours = best_named(ours, modelled, workload, threads);
      const bool ours_agree = gpu_ours == model_ours || (model_ours.rfind("tie: ", 0) == 0 &&
                                                         model_ours.find(gpu_ours) != std::string::npos);
      same_best_ours += ours_agree;
      std::printf(" %s / %s |", gpu_ours.c_str(), model_ours.c_str());
      std::printf(" %s |\n", fixed(model::spearman(gpu, mine), "%.2f").c_str());
    }
    if (!all_measured.empty()) {
      std::printf("| %s | all | | | |", workload.c_str());
      for (std::size_t i = 0; i < ours.size(); ++i) std::printf(" |");
      std::printf(" | %s |\n", fixed(model::spearman(all_measured, all_modelled), "%.2f").c_str());
    }
  }
  std::printf("\nSame best other stack (a tie that holds it counted): %d of %d.", same_best, points);
  for (std::size_t i = 0; i < ours.size(); ++i)
    std::printf(" %s on the same side of the best other: %d of %d.", ours[i].c_str(), same_side[i], points);
  std::printf(" Same fastest evpool stack (a tie that holds it counted): %d of %d.\n", same_best_ours, points);
  return 0;
}

}  // namespace
}  // namespace evpool::bench

int main(int argc, char **argv) { return evpool::bench::run(evpool::bench::parse(argc, argv)); }
