// evpool bench: one thread that uses two pools in turn, against one pool, on one thread.
//
// A thread finds its cache for a pool through the hints of its cache directory
// (detail/thread_cache_directory.h): a miss means the slow lookup. A scheduler that leases a stream
// and then gets an event, or uses instance() beside instance_for(cudaEventDefault), alternates two
// pools on every call. Each benchmark does two Get+Put pairs an iteration (items: pairs):
//   one_pool        both pairs on pool A
//   two_pools       a pair on pool A, then one on pool B
//   three_pools     pools A, B, C in turn (three pairs an iteration): more pools than hints
// Host backend (the pool's code alone), cache warm. With --cuda, the same over CUDAEventPool and
// CUDAStreamPool (a stream lease, then an event): the pools as a scheduler uses them.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "evpool/host_backend.h"

namespace {

using Pool = evpool::BasicHandlePool<evpool::HostBackend>;

template <class P>
[[gnu::always_inline]] inline void get_put(P &pool) {
  auto event = pool.Get(0);
  benchmark::DoNotOptimize(event);
  pool.Put(std::move(event), 0);
}

void one_pool(benchmark::State &state) {
  evpool::HostBackend backend(1);
  Pool a(backend);
  for (auto _ : state) {
    get_put(a);
    get_put(a);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}

void two_pools(benchmark::State &state) {
  evpool::HostBackend backend(1);
  Pool a(backend), b(backend);
  for (auto _ : state) {
    get_put(a);
    get_put(b);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}

void three_pools(benchmark::State &state) {
  evpool::HostBackend backend(1);
  Pool a(backend), b(backend), c(backend);
  for (auto _ : state) {
    get_put(a);
    get_put(b);
    get_put(c);
  }
  state.SetItemsProcessed(state.iterations() * 3);
}

// A stream lease and an event from the process-wide pools, in turn: one query of the stream
// (cudaStreamQuery) on every lease.
void cuda_stream_then_event(benchmark::State &state) {
  evpool::CUDAStreamPool &streams = evpool::CUDAStreamPool::instance();
  evpool::CUDAEventPool &events = evpool::CUDAEventPool::instance();
  for (auto _ : state) {
    auto stream = streams.Get(0);
    benchmark::DoNotOptimize(stream);
    get_put(events);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}

// The same two pools' events alone, for the lease's own cost: instance() and instance_for(0).
void cuda_two_event_pools(benchmark::State &state) {
  evpool::CUDAEventPool &plain = evpool::CUDAEventPool::instance();
  evpool::CUDAEventPool &timing = evpool::CUDAEventPool::instance_for(cudaEventDefault);
  for (auto _ : state) {
    get_put(plain);
    get_put(timing);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}

}  // namespace

BENCHMARK(one_pool);
BENCHMARK(two_pools);
BENCHMARK(three_pools);

int main(int argc, char **argv) {
  bool cuda = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cuda") == 0)
      cuda = true;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  if (cuda) {
    benchmark::RegisterBenchmark("cuda_stream_then_event", cuda_stream_then_event);
    benchmark::RegisterBenchmark("cuda_two_event_pools", cuda_two_event_pools);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
