// evpool scheduler model: what the GPU measured, read back, and how the model's ranking of the
// stacks is compared with the GPU's.
//
// Design rationale
// ----------------
// The model is worth running on the host only if it ranks designs as the GPU does. So the check
// reads the GPU's figures from the benchmark's own output (bench/scheduler_bench.cc's lines, kept
// in bench/results/<host>/verdict/scheduler-run.txt) rather than from numbers copied into code, and
// asks, per workload and thread count, what a reader of docs/scheduler.md asks: which stack is
// best (other than the limit and the graph, as there), and is evpool ahead of that best or behind
// it; and, over all stacks, Spearman's rank correlation between the modelled and the measured
// tasks per second (ties get their average rank).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <istream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace evpool::model {

/// Tasks per second, by (workload, threads, stack).
using Rates = std::map<std::tuple<std::string, int, std::string>, double>;

/// The `scheduler workload=... threads=... stack=... tasks_per_s=...` lines of a scheduler bench
/// run; other lines are skipped. Never throws but std::bad_alloc.
inline Rates parse_scheduler_run(std::istream &in) {
  Rates rates;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != "scheduler") continue;
    std::string workload, stack;
    int threads = -1;
    double tasks_per_s = -1;
    while (words >> word) {
      const std::size_t equals = word.find('=');
      if (equals == std::string::npos) continue;
      const std::string key = word.substr(0, equals), value = word.substr(equals + 1);
      try {
        if (key == "workload") workload = value;
        if (key == "stack") stack = value;
        if (key == "threads") threads = std::stoi(value);
        if (key == "tasks_per_s") tasks_per_s = std::stod(value);
      } catch (const std::exception &) {
        threads = -1;  // a malformed figure: the line is skipped
      }
    }
    if (!workload.empty() && !stack.empty() && threads > 0 && tasks_per_s >= 0)
      rates[{workload, threads, stack}] = tasks_per_s;
  }
  return rates;
}

/// Ranks from 1 (the largest value), ties getting the mean of the ranks they span.
inline std::vector<double> ranks_descending(const std::vector<double> &values) {
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  std::vector<double> ranks(values.size());
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin + 1;
    while (end < order.size() && values[order[end]] == values[order[begin]]) ++end;
    const double mean_rank = (static_cast<double>(begin + 1) + static_cast<double>(end)) / 2;
    for (std::size_t i = begin; i < end; ++i) ranks[order[i]] = mean_rank;
    begin = end;
  }
  return ranks;
}

/// Spearman's rank correlation of two equally long series (Pearson's over their ranks, so that
/// ties are handled); NaN for fewer than two values or a constant series.
inline double spearman(const std::vector<double> &a, const std::vector<double> &b) {
  if (a.size() != b.size() || a.size() < 2) return std::nan("");
  const std::vector<double> x = ranks_descending(a), y = ranks_descending(b);
  const double n = static_cast<double>(x.size());
  double mean_x = 0, mean_y = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mean_x += x[i] / n, mean_y += y[i] / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    syy += (y[i] - mean_y) * (y[i] - mean_y);
  }
  if (sxx == 0 || syy == 0) return std::nan("");
  return sxy / std::sqrt(sxx * syy);
}

/// The best of `stacks` by `rate` (the first of equals), and how many share its rate.
template <class Rate>
std::pair<std::string, std::size_t> best_of(const std::vector<std::string> &stacks, Rate rate) {
  std::string best;
  double best_rate = -1;
  std::size_t sharing = 0;
  for (const std::string &stack : stacks) {
    const double r = rate(stack);
    if (r > best_rate) {
      best = stack, best_rate = r, sharing = 1;
    } else if (r == best_rate) {
      ++sharing;
    }
  }
  return {best, sharing};
}

}  // namespace evpool::model
