// evpool bench: what each step from a Get+Put to a copied shared lease adds, on one thread.
//
// The contention benchmark's `lease-shared` workload (LeaseShared, one copy, both dropped) runs at
// a quarter of `pair`'s rate, and the question is which part of it costs what. Each benchmark here
// adds one step to the one before, on the same pool and thread:
//   pair                 Get, then Put
//   lease                a UniqueLease: the lease count kept in the thread's cache, the fork
//                        generation recorded and compared
//   lease_shared_alone   a SharedLease never copied: its control block, taken from and given
//                        back to the cache's spare blocks
//   lease_shared_copied  the same with one copy: the count's increment, and the first drop's
//                        decrement (the last drop only reads it)
// Host backend (the pool's code alone), one thread, cache warm: no depot, no contention.
#include <benchmark/benchmark.h>

#include "contention_case.h"  // the contention workloads' loops: run_pair, run_lease, run_lease_shared
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"

namespace {

using Pool = evpool::BasicHandlePool<evpool::HostBackend>;

struct Fixture {
  evpool::HostBackend backend{1};
  Pool pool{backend};
};

void pair(benchmark::State &state) {
  Fixture fixture;
  evpool::bench::run_pair(state, fixture.pool, 0);
}

void lease(benchmark::State &state) {
  Fixture fixture;
  evpool::bench::run_lease(state, fixture.pool, 0);
}

// The one step the contention workloads have no loop for.
void lease_shared_alone(benchmark::State &state) {
  Fixture fixture;
  for (auto _ : state) {
    auto lease = fixture.pool.LeaseShared(0);
    benchmark::DoNotOptimize(lease);
  }
}

void lease_shared_copied(benchmark::State &state) {
  Fixture fixture;
  evpool::bench::run_lease_shared(state, fixture.pool, 0);
}

BENCHMARK(pair);
BENCHMARK(lease);
BENCHMARK(lease_shared_alone);
BENCHMARK(lease_shared_copied);

}  // namespace

BENCHMARK_MAIN();
