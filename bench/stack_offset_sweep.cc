// evpool bench: one thread's Get+Put loop, with the caller's stack moved across a 4 KiB page.
//
// On the H200 hosts the contention benchmark's one-thread pair loop runs at about 5 or about 10 ns
// a pair, and which one a run gets changes with the pool instance and the host
// (docs/benchmarks.md, "The slow mode"). Those VMs have no PMU, so the cause cannot be counted;
// this measures what can be: the same pool and the same code, with the frame of the loop (and so
// the event that the loop keeps in memory) moved in 16-byte steps over one page. A load that
// follows a store whose address agrees in its low 12 bits may wait for it (4K aliasing), so this
// is where layout effects of that kind show. Thread-private stacks, the benchmark's limit, run the
// same loop as the reference.
//
// Usage: evpool_stack_offset_sweep [host|cuda] [pairs per offset, default 1000000] [--each]
// Prints, per variant, the least, quartiles and most ns per pair over the 256 offsets, and the
// same of each pool's time per pair over private's at the same offset; with --each, every offset.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"
#include "one_thread_pair_loop.h"
#include "thread_private_stacks.h"

namespace {

constexpr std::size_t kPage = 4096, kStep = 16;

using evpool::bench::ns_per_pair;

// The loop's frame lies `shift` bytes further down the stack than with a shift of 0.
template <class Source>
[[gnu::noinline]] double ns_per_pair_shifted(Source &source, long pairs, std::size_t shift) {
  auto *pad = static_cast<volatile char *>(__builtin_alloca(shift + kStep));
  pad[0] = 0;  // keeps the allocation
  return ns_per_pair(source, pairs);
}

struct Quartiles {
  double least, q1, median, q3, most;
};
Quartiles quartiles_of(std::vector<double> figures) {
  std::sort(figures.begin(), figures.end());
  const auto at = [&](double quantile) {
    return figures[static_cast<std::size_t>(quantile * (figures.size() - 1))];
  };
  return {at(0), at(0.25), at(0.5), at(0.75), at(1)};
}
void print(const char *name, const Quartiles &q, const char *unit) {
  std::printf("%-24s least %.2f  q1 %.2f  median %.2f  q3 %.2f  most %.2f %s\n", name, q.least, q.q1,
              q.median, q.q3, q.most, unit);
}

// At each offset every source runs its loop in turn (each the best of two runs), so that the
// ratios compare runs made within a few milliseconds of each other: on the VMs the same loop's
// speed drifts over seconds (docs/benchmarks.md).
template <class... Sources>
void sweep(const char *const (&names)[sizeof...(Sources)], long pairs, bool each, Sources &...sources) {
  constexpr std::size_t kSources = sizeof...(Sources);
  ((sources.Put(sources.Get(0), 0), (void)ns_per_pair(sources, pairs)), ...);  // first events, caches, warm-up
  std::vector<double> figures[kSources], ratios[kSources - 1];
  for (std::size_t shift = 0; shift < kPage; shift += kStep) {
    const double at_shift[kSources] = {
        std::min(ns_per_pair_shifted(sources, pairs, shift), ns_per_pair_shifted(sources, pairs, shift))...};
    for (std::size_t i = 0; i < kSources; ++i) {
      figures[i].push_back(at_shift[i]);
      if (i + 1 < kSources) ratios[i].push_back(at_shift[i] / at_shift[kSources - 1]);
      if (each) std::printf("shift %4zu %-16s %.2f ns/pair\n", shift, names[i], at_shift[i]);
    }
  }
  std::printf("over %zu stack offsets:\n", figures[0].size());
  for (std::size_t i = 0; i < kSources; ++i) print(names[i], quartiles_of(figures[i]), "ns/pair");
  for (std::size_t i = 0; i + 1 < kSources; ++i) {
    const std::string name = std::string(names[i]) + " / " + names[kSources - 1];
    print(name.c_str(), quartiles_of(ratios[i]), "(time per pair, same offset)");
  }
  std::fflush(stdout);
}

template <class Backend>
void sweep_all(const Backend &backend, long pairs, bool each) {
  evpool::BasicHandlePool<Backend> pool(backend, Backend::kDefaultOptions);
  evpool::BasicHandlePool<Backend, evpool::NoStatsPolicy<>> nostats(backend, Backend::kDefaultOptions);
  evpool::bench::ThreadPrivateStacks<Backend> stacks(backend, Backend::kDefaultOptions, 1);
  sweep({"evpool", "evpool-nostats", "private"}, pairs, each, pool, nostats, stacks.of_thread(0));
}

}  // namespace

int main(int argc, char **argv) {
  const std::string_view backend = argc > 1 ? argv[1] : "host";
  const long pairs = argc > 2 ? std::atol(argv[2]) : 1000000;
  const bool each = argc > 3 && std::strcmp(argv[3], "--each") == 0;
  if (pairs <= 0 || (backend != "host" && backend != "cuda")) {
    std::fprintf(stderr, "usage: %s [host|cuda] [pairs per offset] [--each]\n", argv[0]);
    return 2;
  }
  if (backend == "cuda")
    sweep_all(evpool::CUDAEventBackend(), pairs, each);
  else
    sweep_all(evpool::HostBackend(1), pairs, each);
}
