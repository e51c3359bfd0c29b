// evpool bench: one thread's Get+Put loop, timed. The single-thread probes (stack_offset_sweep.cc,
// core_sharing_probe.cc) run this one loop, so that their figures describe the same code; it is
// the contention benchmark's pair loop on device 0, with the caller's event kept in memory by
// DoNotOptimize as there.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <utility>

namespace evpool::bench {

/// Nanoseconds per Get+Put of `source` on device 0, over `pairs` pairs. Not inlined: the loop's
/// frame lies below its caller's, where stack_offset_sweep.cc moves it.
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

}  // namespace evpool::bench
