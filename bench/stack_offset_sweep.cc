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
// Prints, per variant, the least, quartiles and most ns per pair over the 256 offsets (each the
// best of two runs); with --each, every offset too.
#include <benchmark/benchmark.h>  // DoNotOptimize, as in the contention benchmark's loop

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/cuda_backend.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"
#include "thread_private_stacks.h"

namespace {

constexpr std::size_t kPage = 4096, kStep = 16;

template <class Source>
[[gnu::noinline]] double ns_per_pair(Source &source, long pairs) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    auto event = source.Get(0);
    benchmark::DoNotOptimize(event);
    source.Put(std::move(event), 0);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(pairs);
}

// The loop's frame lies `shift` bytes further down the stack than with a shift of 0.
template <class Source>
[[gnu::noinline]] double ns_per_pair_shifted(Source &source, long pairs, std::size_t shift) {
  auto *pad = static_cast<volatile char *>(__builtin_alloca(shift + kStep));
  pad[0] = 0;  // keeps the allocation
  return ns_per_pair(source, pairs);
}

template <class Source>
void sweep(const char *name, Source &source, long pairs, bool each) {
  source.Put(source.Get(0), 0);  // the first event, and the thread's cache
  (void)ns_per_pair(source, pairs);  // warm-up
  std::vector<double> figures;
  for (std::size_t shift = 0; shift < kPage; shift += kStep) {
    const double best = std::min(ns_per_pair_shifted(source, pairs, shift), ns_per_pair_shifted(source, pairs, shift));
    figures.push_back(best);
    if (each) std::printf("%s shift %4zu: %.2f ns/pair\n", name, shift, best);
  }
  std::sort(figures.begin(), figures.end());
  const auto at = [&](double quantile) { return figures[static_cast<std::size_t>(quantile * (figures.size() - 1))]; };
  std::printf("%-16s least %.2f  q1 %.2f  median %.2f  q3 %.2f  most %.2f ns/pair over %zu stack offsets\n", name,
              at(0), at(0.25), at(0.5), at(0.75), at(1), figures.size());
  std::fflush(stdout);
}

template <class Backend>
void sweep_all(const Backend &backend, long pairs, bool each) {
  {
    evpool::BasicEventPool<Backend> pool(backend, Backend::kDefaultFlags);
    sweep("evpool", pool, pairs, each);
  }
  {
    evpool::BasicEventPool<Backend, evpool::NoStatsPolicy<>> pool(backend, Backend::kDefaultFlags);
    sweep("evpool-nostats", pool, pairs, each);
  }
  evpool::bench::ThreadPrivateStacks<Backend> stacks(backend, Backend::kDefaultFlags, 1);
  sweep("private", stacks.of_thread(0), pairs, each);
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
    sweep_all(evpool::CUDABackend(), pairs, each);
  else
    sweep_all(evpool::HostBackend(1), pairs, each);
}
