// evpool bench: is the one-thread pair loop's slow mode the physical core being shared?
//
// On the H200 hosts the pair loop of one thread runs at about 3.5 or about 6 ns a pair, in windows
// of a few hundred milliseconds, while `private` barely changes (docs/benchmarks.md, "The slow
// mode" and "The slow mode is a shared core"). The VMs have no PMU, so this tells the candidate
// causes apart by their signatures, with two loops that touch no memory, measured in the same
// rounds as the pools:
//
//   - `alu-wide`: eight chains of adds that run side by side, bound by how many instructions the
//     core issues per cycle. Another thread on the physical core (a hyperthread sibling that the
//     guest cannot see: lscpu reports one thread per core) takes issue slots from it: it slows.
//   - `alu-chain`: one chain of multiply-adds, bound by latency, issuing less than one
//     instruction a cycle. A sibling leaves it alone; a lower clock slows it as much as the wide
//     loop.
//
// Each round runs every loop once, within a few milliseconds. A round is "quiet" if its wide
// loop's step took less than `quiet_ratio` of its chain loop's step, "shared" otherwise; per
// class, the median of every loop and of each pool's time over `private`'s in the same round. The
// ratio of the two loops does not move with the clock. On a core of its own the wide step is
// about two thirds of the chain step (12 adds on the 5 ALUs of these Xeons, 2.4 cycles at best,
// measured 2.65, against 4), so the default, 0.8, is that with a fifth to spare. A vCPU whose core
// is shared all along shows no quiet rounds. If only the wide loop and the pools slow down in
// shared rounds, the cause is issue slots taken by another thread on the core, not the clock, the
// caches or the layout.
//
// Usage: evpool_core_sharing_probe [host|cuda] [rounds, default 400] [pairs per loop, default
// 200000] [quiet_ratio, default 0.8] [--each]; with --each, every round's figures too.
#include <benchmark/benchmark.h>  // DoNotOptimize

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"
#include "one_thread_pair_loop.h"
#include "thread_private_stacks.h"

namespace {

using Clock = std::chrono::steady_clock;
double ns_since(Clock::time_point start, long steps) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(steps);
}

using evpool::bench::ns_per_pair;

// Eight chains of adds that the core runs side by side (each step adds a constant to every chain,
// then folds four of them into the other four): about two and a half cycles a step on a core of
// its own. The empty asm keeps every chain in a register and stops the compiler from folding or
// vectorising the loop.
[[gnu::noinline]] double ns_per_wide_step(long steps) {
  std::uint64_t a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = 8;
  const auto start = Clock::now();
  for (long i = 0; i < steps; ++i) {
    a += 1, b += 3, c += 5, d += 7, e += 11, f += 13, g += 17, h += 19;
    a += b, c += d, e += f, g += h;
    asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
  }
  benchmark::DoNotOptimize(a + b + c + d + e + f + g + h);
  return ns_since(start, steps);
}

// One multiply-add chain: four cycles a step (imul 3, add 1), whatever else the core runs.
[[gnu::noinline]] double ns_per_chain_step(long steps) {
  std::uint64_t x = 1;
  const auto start = Clock::now();
  for (long i = 0; i < steps; ++i) {
    x = x * 0x9e3779b97f4a7c15u + 1;
    asm volatile("" : "+r"(x));
  }
  benchmark::DoNotOptimize(x);
  return ns_since(start, steps);
}

double median(std::vector<double> figures) {
  std::sort(figures.begin(), figures.end());
  return figures.empty() ? 0 : figures[figures.size() / 2];
}

// Columns: the pools first, `private` last of them, then the two loops without memory.
constexpr const char *kNames[] = {"evpool", "evpool-nostats", "private", "alu-wide", "alu-chain"};
constexpr std::size_t kPools = 3, kColumns = std::size(kNames), kWide = 3, kChain = 4;

template <class Backend>
void probe(const Backend &backend, int rounds, long pairs, double quiet_ratio, bool each) {
  evpool::BasicHandlePool<Backend> pool(backend, Backend::kDefaultOptions);
  evpool::BasicHandlePool<Backend, evpool::NoStatsPolicy<>> nostats(backend, Backend::kDefaultOptions);
  evpool::bench::ThreadPrivateStacks<Backend> stacks(backend, Backend::kDefaultOptions, 1);
  auto &own = stacks.of_thread(0);
  pool.Put(pool.Get(0), 0), nostats.Put(nostats.Get(0), 0), own.Put(own.Get(0), 0);  // first events

  std::vector<std::vector<double>> figures(static_cast<std::size_t>(rounds));
  for (auto &round : figures) {
    round = {ns_per_pair(pool, pairs), ns_per_pair(nostats, pairs), ns_per_pair(own, pairs),
             ns_per_wide_step(pairs), ns_per_chain_step(pairs)};
    if (each) {
      for (std::size_t i = 0; i < kColumns; ++i) std::printf("%s %.3f  ", kNames[i], round[i]);
      std::printf("\n");
    }
  }
  std::printf("%d rounds of %ld pairs (or steps) per loop, quiet below a wide/chain ratio of %.2f; ns per pair (or "
              "step), median per class\n",
              rounds, pairs, quiet_ratio);
  for (const bool quiet : {true, false}) {
    std::vector<double> column[kColumns], over_private[kPools - 1];
    for (const auto &round : figures) {
      if ((round[kWide] < quiet_ratio * round[kChain]) != quiet) continue;
      for (std::size_t i = 0; i < kColumns; ++i) column[i].push_back(round[i]);
      for (std::size_t i = 0; i + 1 < kPools; ++i) over_private[i].push_back(round[i] / round[kPools - 1]);
    }
    std::printf("%-7s %4zu rounds:", quiet ? "quiet" : "shared", column[0].size());
    if (column[0].empty()) {
      std::printf("\n");
      continue;
    }
    for (std::size_t i = 0; i < kColumns; ++i) std::printf("  %s %.2f", kNames[i], median(column[i]));
    for (std::size_t i = 0; i + 1 < kPools; ++i)
      std::printf("  %s/private %.2f", kNames[i], median(over_private[i]));
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char **argv) {
  const std::string_view backend = argc > 1 ? argv[1] : "host";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 400;
  const long pairs = argc > 3 ? std::atol(argv[3]) : 200000;
  const double quiet_ratio = argc > 4 ? std::atof(argv[4]) : 0.8;
  const bool each = argc > 5 && std::strcmp(argv[5], "--each") == 0;
  if (rounds <= 0 || pairs <= 0 || quiet_ratio <= 0 || (backend != "host" && backend != "cuda")) {
    std::fprintf(stderr, "usage: %s [host|cuda] [rounds] [pairs per loop] [quiet_ratio] [--each]\n", argv[0]);
    return 2;
  }
  if (backend == "cuda")
    probe(evpool::CUDAEventBackend(), rounds, pairs, quiet_ratio, each);
  else
    probe(evpool::HostBackend(1), rounds, pairs, quiet_ratio, each);
}
