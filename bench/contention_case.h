// evpool bench: one benchmark of the contention suite, a variant over a backend under a workload:
// its set-up (the variant, pre-warmed, and what the workload needs besides), what each thread runs,
// and its tear-down.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "evpool/cuda_error.h"
#include "gpu_streams.h"
#include "stream_wait_via.h"
#include "variants.h"
#include "workloads.h"

namespace evpool::bench {

/// Whether each benchmark thread warms its source before its timed loop (Case::warm_up);
/// --thread_warmup=0 turns it off, to compare with the runs made before it existed.
inline bool thread_warm_up = true;

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
std::int64_t run_handoff(benchmark::State &state, Variant &variant, Source &source, int device, Ring &ring,
                         HandoffRole role) {
  return run_in_pairs(
      state, ring, role, [&] { return source.Get(device).release(); },
      [&](auto handle) { source.Put(variant.adopt(handle, device), device); });
}

// The cross-stream dependency: `consumer` waits for what `producer` has queued so far.
template <class Source>
void record_and_wait(Source &source, int device, cudaStream_t consumer, cudaStream_t producer, FirstError &errors) {
  auto event = source.Get(device);
  errors(cudaEventRecord(event.get(), producer));
  errors(cudaStreamWaitEvent(consumer, event.get(), 0));
  source.Put(std::move(event), device);
}

template <class Source>
std::int64_t run_sync(benchmark::State &state, Source &source, const ThreadStreams &streams, FirstError &errors) {
  QueueBound bound;
  for (auto _ : state) {
    record_and_wait(source, streams.device, streams.b, streams.a, errors);
    errors(bound.step(streams.b));
  }
  return state.iterations();
}

// Ends with A waiting for B, which waited for A: all of the step's work ends on A, and a capture
// begun on A, which B joined at the first wait, has B joined back into it.
template <class Source>
void schedule_step(Source &source, const ThreadStreams &streams, int &value, FirstError &errors) {
  errors(cudaMemsetAsync(streams.buffer, ++value & 0xff, kScheduleBufferBytes, streams.a));
  record_and_wait(source, streams.device, streams.b, streams.a, errors);
  errors(cudaMemsetAsync(streams.buffer, ++value & 0xff, kScheduleBufferBytes, streams.b));
  record_and_wait(source, streams.device, streams.a, streams.b, errors);
}

template <class Source>
std::int64_t run_schedule(benchmark::State &state, Source &source, const ThreadStreams &streams,
                          FirstError &errors) {
  QueueBound bound;
  int value = 0;
  for (auto _ : state) {
    schedule_step(source, streams, value, errors);
    errors(bound.step(streams.a));
  }
  return state.iterations() * 2;
}

/// graph's steps, captured and instantiated once per thread before its timed loop. The capture
/// runs the Gets and Puts; a replay runs no pool call, its records and waits being graph edges.
class CapturedSchedule {
 public:
  template <class Source>
  void capture(Source &source, const ThreadStreams &streams, FirstError &errors) {
    // One capture at a time: a shared pool hands an event that one open capture recorded to
    // another thread's, and that crashes the driver (H200, driver 580: SIGSEGV from 16 threads,
    // with every pool that moves events between threads, and in a plain program sharing events).
    const std::lock_guard one_at_a_time(capturing_);
    // Thread-local: the threads not capturing must stay free to make any call meanwhile.
    errors(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeThreadLocal));
    int value = 0;
    for (int step = 0; step < kGraphSteps; ++step) schedule_step(source, streams, value, errors);
    errors(cudaStreamEndCapture(streams.a, &graph_));
    if (graph_ != nullptr) errors(cudaGraphInstantiate(&exec_, graph_, 0));
  }

  cudaGraphExec_t exec() const { return exec_; }

  void destroy(FirstError &errors) {
    if (exec_ != nullptr) errors(cudaGraphExecDestroy(exec_));
    if (graph_ != nullptr) errors(cudaGraphDestroy(graph_));
    exec_ = nullptr;
    graph_ = nullptr;
  }

 private:
  static inline std::mutex capturing_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

inline std::int64_t run_graph(benchmark::State &state, const CapturedSchedule &captured,
                              const ThreadStreams &streams, FirstError &errors) {
  QueueBound bound;
  for (auto _ : state) {
    errors(cudaGraphLaunch(captured.exec(), streams.a));
    errors(bound.step(streams.a));  // the graph ends on A, with B joined back: all of it
  }
  return state.iterations() * 2 * kGraphSteps;
}

template <class Source>
std::int64_t run_wait(benchmark::State &state, Source &source, const ThreadStreams &streams, FirstError &errors) {
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
  static constexpr bool kOnStreams = kWorkload == Workload::kSync || kWorkload == Workload::kSchedule ||
                                     kWorkload == Workload::kGraph || kWorkload == Workload::kWait;
  static constexpr bool kInPairs = kWorkload == Workload::kHandoff || kWorkload == Workload::kLeaseHandoff;
  using Ring = HandoffRing<typename HandedOver<Backend, Variant, kWorkload>::type>;

  static inline std::unique_ptr<Variant> variant;
  static inline std::unique_ptr<Ring[]> rings;       // handoffs: one per producer and consumer pair
  static inline std::vector<ThreadStreams> streams;  // sync, schedule, graph, wait: one per thread
  static inline int devices = 1;

  // The wall-clock span of the timed loops, for wall_items_per_second (see Run): the last thread
  // to reach the start barrier, the first to leave the end barrier, the events of all threads and
  // how many threads are done. Reset by Setup.
  static inline std::atomic<std::int64_t> last_start_ns{0};
  static inline std::atomic<std::int64_t> first_end_ns{0};
  static inline std::atomic<std::int64_t> all_events{0};
  static inline std::atomic<int> threads_done{0};

  // Thread 2k produces into ring k, thread 2k+1 consumes from it.
  static Ring &ring_of(int thread) { return rings[static_cast<std::size_t>(thread / 2)]; }
  static HandoffRole role_of(int thread) {
    return thread % 2 == 0 ? HandoffRole::kProducer : HandoffRole::kConsumer;
  }

  static int device_of_thread(int thread) {
    return kInfo.placement == Placement::kRoundRobin ? thread % devices : 0;
  }

  // What the thread holds at most, so that pre-warming makes the run measure reuse.
  static int events_held(int thread) {
    if constexpr (kInPairs)
      return thread % 2 == 0 ? static_cast<int>(kHandoffEventsPerPair<typename Backend::handle_type>) : 0;
    // graph counts 2 x kGraphSteps events a launch, but its capture holds only what a schedule step
    // does: pre-warmed as schedule is, the two report comparable events_created.
    if constexpr (kWorkload == Workload::kGraph) return info(Workload::kSchedule).events_per_iteration;
    return kInfo.events_per_iteration;
  }

  static void Setup(const benchmark::State &state) {
    const int threads = state.threads();
    last_start_ns.store(0);
    first_end_ns.store(std::numeric_limits<std::int64_t>::max());
    all_events.store(0);
    threads_done.store(0);
    const Backend backend = Factory::make(kInfo.placement);
    devices = backend.device_count();
    variant = std::make_unique<Variant>(backend, threads);
    if constexpr (kInPairs) rings = std::make_unique<Ring[]>(static_cast<std::size_t>(threads / 2));
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

  // The benchmark thread's own warm-up, before its timed loop: it gets what it holds at most and
  // puts it back. Google Benchmark starts new threads for every run, and prewarm() runs on the
  // set-up thread, so without this a variant with thread caches (evpool) met each new thread with
  // an empty cache: its first Get registered the cache (under the pool's registry lock) and,
  // finding the pre-warmed events in the set-up thread's cache, created an event
  // (cudaEventCreate), all inside the timed loop, while the private stacks' events were ready.
  // On the 16-core H200 at 128 threads, evpool's sync then read 1.75 times private's, and its
  // threads' CPU time summed to 1.4 times 16 cores over the interval Google Benchmark divides by:
  // only staggered intervals allow that (see Run). Handoff's threads are left as they are: their
  // Gets and Puts are on different threads.
  template <class Source>
  static void warm_up(Source &source, int thread, int device) {
    if constexpr (!kInPairs) {
      if (!thread_warm_up) return;
      std::vector<decltype(source.Get(device))> held;
      held.reserve(static_cast<std::size_t>(events_held(thread)));
      for (int i = 0; i < events_held(thread); ++i) held.push_back(source.Get(device));
      for (auto &event : held) source.Put(std::move(event), device);
    }
  }

  static std::int64_t now_ns() {
    const auto since_epoch = std::chrono::steady_clock::now().time_since_epoch();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count();
  }
  static void raise_to(std::atomic<std::int64_t> &value, std::int64_t to) {
    for (std::int64_t seen = value.load(); seen < to && !value.compare_exchange_weak(seen, to);) {
    }
  }
  static void lower_to(std::atomic<std::int64_t> &value, std::int64_t to) {
    for (std::int64_t seen = value.load(); seen > to && !value.compare_exchange_weak(seen, to);) {
    }
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
    warm_up(source, thread, device);
    FirstError errors;
    CapturedSchedule captured;  // graph's, captured here so that the timing leaves the capture out
    if constexpr (kWorkload == Workload::kGraph)
      captured.capture(source, streams[static_cast<std::size_t>(thread)], errors);
    std::int64_t events = 0;
    // Google Benchmark divides the events of all threads by the MEAN of the threads' own timed
    // intervals, so threads whose intervals do not overlap (some finish early, others start late)
    // read faster than the wall clock says. wall_items_per_second divides by the wall-clock span
    // instead: from the last thread's arrival at the start barrier to the first thread's leaving
    // of the end barrier (a little longer than the span, never shorter). Where it is well below
    // items_per_second, the threads ran staggered and items_per_second overstates.
    raise_to(last_start_ns, now_ns());
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
    else if constexpr (kWorkload == Workload::kGraph)
      events = run_graph(state, captured, streams[static_cast<std::size_t>(thread)], errors);
    else if constexpr (kWorkload == Workload::kWait)
      events = run_wait(state, source, streams[static_cast<std::size_t>(thread)], errors);
    else if constexpr (kWorkload == Workload::kLease)
      events = run_lease(state, source, device);
    else if constexpr (kWorkload == Workload::kLeaseShared)
      events = run_lease_shared(state, source, device);
    else if constexpr (kWorkload == Workload::kLeaseHandoff)
      events = run_lease_handoff(state, source, device, ring_of(thread), role_of(thread));
    lower_to(first_end_ns, now_ns());
    captured.destroy(errors);
    all_events.fetch_add(events);
    if (threads_done.fetch_add(1) + 1 == state.threads()) {  // the last thread here: all have written
      const double span_s = static_cast<double>(first_end_ns.load() - last_start_ns.load()) * 1e-9;
      const double all = static_cast<double>(all_events.load());
      if (span_s > 0) state.counters["wall_items_per_second"] = all / span_s;
    }
    if (errors.error() != cudaSuccess)
      state.SkipWithError(evpool::describe_cuda_error(errors.error()).c_str());
    state.SetItemsProcessed(events);
    if (thread == 0) {
      state.counters["events_created"] = static_cast<double>(variant->events_created());
      if constexpr (requires { variant->hit_rate(); }) state.counters["hit_rate"] = variant->hit_rate();
    }
  }
};

}  // namespace evpool::bench
