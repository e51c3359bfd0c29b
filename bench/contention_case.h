// evpool bench: one benchmark of the contention suite, a variant over a backend under a workload:
// its set-up (the variant, pre-warmed, and what the workload needs besides), what each thread runs,
// and its tear-down.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gpu_streams.h"
#include "stream_wait_via.h"
#include "variants.h"
#include "workloads.h"

namespace evpool::bench {

// ---- What one thread runs, per workload; each returns the events it counts --------------------

template <class Source>
std::int64_t run_pair(benchmark::State &state, Source &source, int device) {
  for (auto _ : state) {
    auto event = source.Get(device);
    benchmark::DoNotOptimize(event);
    source.Put(std::move(event), device);
  }
  return state.iterations();
}

template <int kHeld, class Source>
std::int64_t run_burst(benchmark::State &state, Source &source, int device) {
  std::array<decltype(source.Get(device)), kHeld> held;
  for (auto _ : state) {
    for (auto &event : held) event = source.Get(device);
    for (auto &event : held) source.Put(std::move(event), device);
  }
  return state.iterations() * kHeld;
}

enum class HandoffRole { kProducer, kConsumer };

// Threads in pairs, one ring each: the producer sends what `make()` returns, kHandoffBatch a
// round; the consumer passes each item it receives to `finish`, and counts them.
template <class Ring, class Make, class Finish>
std::int64_t run_in_pairs(benchmark::State &state, Ring &ring, HandoffRole role, Make make, Finish finish) {
  if (role == HandoffRole::kProducer) {
    for (auto _ : state)
      for (std::size_t i = 0; i < kHandoffBatch; ++i) ring.push(make());
    return 0;
  }
  for (auto _ : state)
    for (std::size_t i = 0; i < kHandoffBatch; ++i) finish(ring.pop());
  return state.iterations() * static_cast<std::int64_t>(kHandoffBatch);
}

// A producer gets a batch of events and sends it; its consumer puts the batch back.
template <class Variant, class Source, class Ring>
std::int64_t run_handoff(benchmark::State &state, Variant &variant, Source &source, int device,
                         Ring &ring, HandoffRole role) {
  return run_in_pairs(
      state, ring, role, [&] { return source.Get(device).release(); },
      [&](auto handle) { source.Put(variant.adopt(handle, device), device); });
}

// The cross-stream dependency: `consumer` waits for what `producer` has queued so far.
template <class Source>
void record_and_wait(Source &source, int device, cudaStream_t consumer, cudaStream_t producer,
                     FirstError &errors) {
  auto event = source.Get(device);
  errors(cudaEventRecord(event.get(), producer));
  errors(cudaStreamWaitEvent(consumer, event.get(), 0));
  source.Put(std::move(event), device);
}

template <class Source>
std::int64_t run_sync(benchmark::State &state, Source &source, const ThreadStreams &streams,
                      FirstError &errors) {
  QueueBound bound;
  for (auto _ : state) {
    record_and_wait(source, streams.device, streams.b, streams.a, errors);
    errors(bound.step(streams.b));
  }
  return state.iterations();
}

template <class Source>
std::int64_t run_schedule(benchmark::State &state, Source &source, const ThreadStreams &streams,
                          FirstError &errors) {
  QueueBound bound;
  int value = 0;
  for (auto _ : state) {
    errors(cudaMemsetAsync(streams.buffer, ++value & 0xff, kScheduleBufferBytes, streams.a));
    record_and_wait(source, streams.device, streams.b, streams.a, errors);
    errors(cudaMemsetAsync(streams.buffer, ++value & 0xff, kScheduleBufferBytes, streams.b));
    record_and_wait(source, streams.device, streams.a, streams.b, errors);
    errors(bound.step(streams.a));  // A now waits for B, which waited for A: all of it
  }
  return state.iterations() * 2;
}

template <class Source>
std::int64_t run_wait(benchmark::State &state, Source &source, const ThreadStreams &streams,
                      FirstError &errors) {
  QueueBound bound;
  for (auto _ : state) {
    wait_through(streams.b, streams.a, source);
    errors(bound.step(streams.b));
  }
  return state.iterations();
}

template <class Pool>
std::int64_t run_lease(benchmark::State &state, Pool &pool, int device) {
  for (auto _ : state) {
    auto lease = pool.Lease(device);
    benchmark::DoNotOptimize(lease);
  }
  return state.iterations();
}

// A producer begins a batch of shared leases and sends it; its consumer drops them, which ends them.
template <class Pool, class Ring>
std::int64_t run_lease_handoff(benchmark::State &state, Pool &pool, int device, Ring &ring, HandoffRole role) {
  return run_in_pairs(
      state, ring, role, [&] { return pool.LeaseShared(device); }, [](auto lease) { lease.reset(); });
}

template <class Pool>
std::int64_t run_lease_shared(benchmark::State &state, Pool &pool, int device) {
  for (auto _ : state) {
    auto lease = pool.LeaseShared(device);
    auto copy = lease;
    benchmark::DoNotOptimize(copy);
  }
  return state.iterations();
}

// ---- The benchmark ----------------------------------------------------------------------------

// What a handoff ring carries: raw handles, or the shared leases of an evpool variant (named only
// where the workload is lease-handoff, which applies to those alone).
template <class Backend, class Variant, Workload kWorkload>
struct HandedOver {
  using type = typename Backend::handle_type;
};
template <class Backend, class Variant>
struct HandedOver<Backend, Variant, Workload::kLeaseHandoff> {
  using type = decltype(std::declval<Variant &>().source(0).LeaseShared(0));
};

/// `Factory` makes the backend (host or cuda); `Variant` is built over it. Setup and Teardown run
/// on one thread around each run; Run runs on every benchmark thread.
template <class Factory, class Variant, Workload kWorkload>
struct Case {
  using Backend = typename Factory::Backend;
  static constexpr WorkloadInfo kInfo = info(kWorkload);
  static constexpr bool kOnStreams =
      kWorkload == Workload::kSync || kWorkload == Workload::kSchedule || kWorkload == Workload::kWait;
  static constexpr bool kInPairs = kWorkload == Workload::kHandoff || kWorkload == Workload::kLeaseHandoff;
  using Ring = HandoffRing<typename HandedOver<Backend, Variant, kWorkload>::type>;

  static inline std::unique_ptr<Variant> variant;
  static inline std::unique_ptr<Ring[]> rings;  // handoffs: one per producer and consumer pair
  static inline std::vector<ThreadStreams> streams;  // sync, schedule, wait: one per thread
  static inline int devices = 1;

  // Thread 2k produces into ring k, thread 2k+1 consumes from it.
  static Ring &ring_of(int thread) { return rings[static_cast<std::size_t>(thread / 2)]; }
  static HandoffRole role_of(int thread) { return thread % 2 == 0 ? HandoffRole::kProducer : HandoffRole::kConsumer; }

  static int device_of_thread(int thread) {
    return kInfo.placement == Placement::kRoundRobin ? thread % devices : 0;
  }

  // What the thread holds at most, so that pre-warming makes the run measure reuse.
  static int events_held(int thread) {
    if constexpr (kInPairs)
      return thread % 2 == 0 ? static_cast<int>(kHandoffEventsPerPair<typename Backend::handle_type>) : 0;
    return kInfo.events_per_iteration;
  }

  static void Setup(const benchmark::State &state) {
    const int threads = state.threads();
    const Backend backend = Factory::make(kInfo.placement);
    devices = backend.device_count();
    variant = std::make_unique<Variant>(backend, threads);
    if constexpr (kInPairs)
      rings = std::make_unique<Ring[]>(static_cast<std::size_t>(threads / 2));
    if constexpr (kOnStreams) {
      for (int t = 0; t < threads; ++t) streams.push_back(ThreadStreams::open(device_of_thread(t)));
      Factory::enter_device(0);
    }
    prewarm(threads);
  }

  static void prewarm(int threads) {
    std::vector<std::pair<int, decltype(variant->source(0).Get(0))>> got;
    for (int t = 0; t < threads; ++t)
      for (int i = 0; i < events_held(t); ++i)
        got.emplace_back(t, variant->source(t).Get(device_of_thread(t)));
    for (auto &[thread, event] : got) variant->source(thread).Put(std::move(event), device_of_thread(thread));
  }

  static void Teardown(const benchmark::State &) {
    for (ThreadStreams &thread_streams : streams) thread_streams.close();
    streams.clear();
    Factory::enter_device(0);
    rings.reset();
    variant.reset();
  }

  static void Run(benchmark::State &state) {
    const int thread = state.thread_index();
    const int device = device_of_thread(thread);
    Factory::enter_device(device);
    auto &source = variant->source(thread);
    FirstError errors;
    std::int64_t events = 0;
    if constexpr (kWorkload == Workload::kPair || kWorkload == Workload::kSpread)
      events = run_pair(state, source, device);
    else if constexpr (kWorkload == Workload::kBurst || kWorkload == Workload::kBurst64)
      events = run_burst<kInfo.events_per_iteration>(state, source, device);
    else if constexpr (kWorkload == Workload::kHandoff)
      events = run_handoff(state, *variant, source, device, ring_of(thread), role_of(thread));
    else if constexpr (kWorkload == Workload::kSync)
      events = run_sync(state, source, streams[static_cast<std::size_t>(thread)], errors);
    else if constexpr (kWorkload == Workload::kSchedule)
      events = run_schedule(state, source, streams[static_cast<std::size_t>(thread)], errors);
    else if constexpr (kWorkload == Workload::kWait)
      events = run_wait(state, source, streams[static_cast<std::size_t>(thread)], errors);
    else if constexpr (kWorkload == Workload::kLease)
      events = run_lease(state, source, device);
    else if constexpr (kWorkload == Workload::kLeaseShared)
      events = run_lease_shared(state, source, device);
    else if constexpr (kWorkload == Workload::kLeaseHandoff)
      events = run_lease_handoff(state, source, device, ring_of(thread), role_of(thread));
    if (errors.error() != cudaSuccess) state.SkipWithError(cudaGetErrorString(errors.error()));
    state.SetItemsProcessed(events);
    if (thread == 0) {
      state.counters["events_created"] = static_cast<double>(variant->events_created());
      if constexpr (requires { variant->hit_rate(); }) state.counters["hit_rate"] = variant->hit_rate();
    }
  }
};

}  // namespace evpool::bench
