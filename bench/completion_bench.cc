// evpool bench: hearing that GPU work is done, on a real GPU. Usage:
//   evpool_completion_bench [--seconds S] [--threads 1,2,4,...] [--variants evpool,host-func,...]
//                           [--idle-seconds S]
//   evpool_completion_bench --open-loop [--seconds S] [--threads 16,128] [--loads 0.25,0.5,0.75]
//                           [--variants evpool,host-func,...] [--saturation-per-s R]
// Every point runs each variant in turn, on device 0. Each requesting thread has a stream of its
// own (cudaStreamNonBlocking) and a 4-byte device buffer, and each request is a 4-byte
// cudaMemsetAsync followed by asking to hear when it is done. Two ways to drive them:
//
// CLOSED LOOP (the default). In a loop each thread enqueues a request, keeping at most 8 in
// flight: with 8 outstanding it waits (pauses, then yields) on a counter of its own that the
// completions decrement. A warm-up of 256 requests per thread, drained, comes first; then all
// threads are released together by a barrier and ask for S seconds (0.5 by default); then they
// stop asking and wait until their requests are done. One line per point and variant:
//   <variant> threads=<n> completions_per_s=<x> latency_median_us=<x> latency_p99_us=<x>
//   poller_cpu_busy=<x|na> poller_cpu_idle=<x|na> queries_per_completion=<x|na>
//
// - completions_per_s: callbacks run during the timed window (release to stop), over its length.
// - latency: ENQUEUE-TO-CALLBACK, the definition of the issue's table of peers: from just before
//   the request's cudaMemsetAsync is enqueued (steady_clock, read by the requesting thread) to the
//   first thing its completion callback does (steady_clock again, on whatever thread runs it).
//   So it holds the enqueue, the GPU's work, the notification's own delay and the callback
//   thread's wake-up. Every request made after the release counts, those that finish while the
//   threads drain included; median and 99th percentile over all threads. With 8 in flight per
//   thread the latency is tied to the throughput (Little's law): compare it at the same
//   throughput, or use the open loop.
// - poller_cpu_busy: CPU time of the mechanism's own threads during the timed window, over its
//   length, in cores (a mechanism with a thread per stream can exceed 1); poller_cpu_idle: the
//   same over --idle-seconds (0.5 by default) once every request is done and the requesters have
//   exited. na where no thread of the mechanism is ours to clock (host-func: the driver's thread).
// - queries_per_completion: event queries the mechanism made during the timed window per
//   completion in it; na where it makes none (host-func, event-sync-thread). evpool-signal's
//   completion signals are reads of host memory, not queries: with them the figure falls towards 0.
//
// OPEN LOOP (--open-loop): latency at a given offered load. For each thread count T (16 and 128
// by default):
// 1. Saturation, measured first: the closed loop above, run for event-sync-thread (a waiter thread
//    per requesting thread in cudaEventSynchronize) at T threads for S seconds. Its
//    completions_per_s, with 8 requests in flight per thread, is the saturation rate R at T
//    (from 8 threads on the driver's own rate, about 0.8 M/s on the H200 host, is what stops it).
//      saturation variant=event-sync-thread threads=<T> method=closed-loop in_flight_per_thread=8
//      completions_per_s=<R> latency_median_us=<x> latency_p99_us=<x> poller_cpu_busy=<x>
//    --saturation-per-s R skips the measurement and uses R at every T (printed method=given).
// 2. Then for each load L (0.25, 0.5, 0.75 by default) and each variant: each of the T threads
//    issues requests on its own stream at L * R / T a second, on a FIXED SCHEDULE: its request k
//    is due at start + (k + phase) * T / (L * R), with a phase drawn uniformly from [0, 1) per
//    thread (a fixed seed: every variant gets the same schedule at a point). Every request due
//    before start + S is issued. The thread sleeps until the next one is due (clock_nanosleep to
//    the absolute time, timer slack 1 us). A request that comes due while its thread is late
//    (woken late, held up by a notify or a memset, or waiting because 256 of its requests are in
//    flight) is issued at once, and ITS LATENCY IS STILL COUNTED FROM ITS DUE TIME, not from when
//    it was issued: a mechanism that holds up its requesters, or cannot keep up, is charged for
//    the queue it causes (no coordinated omission). A thread still catching up S seconds after the
//    window ended gives up on its requests not yet issued: each is counted as ABANDONED, with an
//    infinite latency (so a percentile that falls among them reads inf), which keeps a point of a
//    mechanism that cannot keep up within about 2 S. Then the thread waits until its requests are
//    done. The warm-up is the closed loop's. One line per point and variant:
//      open-loop variant=<v> threads=<T> load=<L> saturation_per_s=<R> offered_per_s=<x>
//      completions_per_s=<x> latency_median_us=<x|inf> latency_p99_us=<x|inf>
//      service_median_us=<x> service_p99_us=<x> issue_lag_median_us=<x> issue_lag_p99_us=<x>
//      abandoned=<n> poller_cpu_busy=<x|na> process_cpu=<x>
//
// - offered_per_s: requests due in the window [start, start + S), over S; completions_per_s:
//   callbacks that started in the window (by their own clock reading), over S: below
//   offered_per_s where the mechanism falls behind.
// - latency: DUE-TO-CALLBACK, from the request's due time to the first thing its completion
//   callback does; every request due in the window counts, those finished after it included,
//   abandoned ones as infinite; median and 99th percentile over all threads.
// - issue_lag: from the due time to just before the memset is enqueued, over the requests issued:
//   the part of the latency spent before the request was made (the requester's wake-up, a notify
//   or a memset that held it up, a wait at 256 in flight). service: the rest, from just before the
//   memset to the callback (the closed loop's enqueue-to-callback), request by request, over the
//   requests issued. The wake-up is in every mechanism's latency alike: compare the service
//   figures too where the latencies are close.
// - poller_cpu_busy: as in the closed loop, over the window. process_cpu: the whole process's CPU
//   time over the window (CLOCK_PROCESS_CPUTIME_ID), in cores, for context: the requesters, the
//   mechanism, and the driver's threads (host-func's callbacks among them). The main thread reads
//   both clocks when it wakes at the window's ends (timer slack 1 us); it warns on stderr where it
//   woke more than 1% of the window late.
//
// Variants (AllVariants below lists them; both modes run those --variants names):
//   evpool             evpool::CompletionQueue, default options (its own poller thread; every
//                      completion heard through an event query: CompletionSignal::kEventQuery),
//                      events from CUDAEventPool::instance()
//   evpool-signal      the same with CompletionSignal::kAuto: completion signals where the device
//                      can (a stream write into pinned host memory, read by the poller), the event
//                      queried only while a signal has not landed
//   evpool-2-pollers,  the same over 2 or 4 queues, thread t asking queue t % n: how many pollers
//   evpool-4-pollers   it takes where one is saturated (only when named in --variants)
//   host-func          cudaLaunchHostFunc behind the memset (competitors/host_func_completions.h)
//   event-sync-thread  a waiter thread per requesting thread, cudaEventSynchronize in order
//                      (competitors/event_sync_threads.h)
//   tf-fifo            TensorFlow's EventMgr: one FIFO under one mutex, a full sweep every
//                      10 us, callbacks on a second thread (competitors/fifo_event_poller.h)
//   pika-poll-all      pika's polling: every pending event queried on every pass, by a thread
//                      that never sleeps (competitors/poll_all_events.h)
#include <cuda_runtime_api.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "competitors/event_sync_threads.h"
#include "competitors/fifo_event_poller.h"
#include "competitors/host_func_completions.h"
#include "competitors/poll_all_events.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_error.h"
#include "evpool/detail/backoff.h"

namespace evpool::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kInFlight = 8;
constexpr int kWarmupRequests = 256;
constexpr std::size_t kMemsetBytes = 4;
// Latency samples kept per point, all threads together, per second of timing: above what the
// driver can complete (about 1.5 M records a second on the H200 host), so none is dropped.
constexpr double kSamplesPerSecond = 4e6;
constexpr std::size_t kMinSamplesPerThread = 4096;

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, evpool::describe_cuda_error(error).c_str());
    std::exit(1);
  }
}

// A requesting thread's counters, written by the callbacks of its requests. One callback at a
// time writes them: every mechanism runs the callbacks of one stream one after another.
struct alignas(128) ThreadState {
  std::atomic<int> in_flight{0};
  std::atomic<std::uint64_t> completed{0};
  std::atomic<std::size_t> samples{0};  // reset after the warm-up; may pass latency_us.size()
  std::atomic<int> error{cudaSuccess};  // the first a callback was told
  std::vector<float> latency_us;        // sized before the run, so that no callback allocates
  // The open loop's window, [window_begin, window_end): callbacks that start in it are counted in
  // completed_in_window, by their own clock reading, however late the main thread wakes. Written
  // by the requester before its first request in the window, which hands them to the callbacks.
  Clock::time_point window_begin = Clock::time_point::max(), window_end = Clock::time_point::min();
  std::atomic<std::uint64_t> completed_in_window{0};
  // The open loop's schedule, set the same way, so that a callback finds its request's number k
  // from its due time, and from the requester's issue_lag_us[k] the enqueue-to-callback part of
  // its latency (into service_us, beside latency_us). Null in the closed loop.
  const float *issue_lag_us = nullptr;
  std::size_t scheduled = 0;  // issue_lag_us's size
  Clock::time_point schedule_start{};
  double interval_ns = 0, phase = 0;
  std::vector<float> service_us;  // sized before the run, as latency_us

  void complete(cudaError_t status, Clock::time_point began) noexcept {
    const auto now = Clock::now();
    if (now >= window_begin && now < window_end) completed_in_window.fetch_add(1, std::memory_order_relaxed);
    if (status != cudaSuccess) {
      int none = cudaSuccess;
      error.compare_exchange_strong(none, status, std::memory_order_relaxed);
    }
    // Relaxed: the samples are read after the requester has seen in_flight fall (acquire) and
    // has been joined.
    const std::size_t at = samples.fetch_add(1, std::memory_order_relaxed);
    if (at < latency_us.size()) {
      const float latency = std::chrono::duration<float, std::micro>(now - began).count();
      latency_us[at] = latency;
      if (issue_lag_us != nullptr && at < service_us.size()) {
        // Due times are schedule_start + (k + phase) * interval, rounded to a nanosecond.
        const long long k = std::llround(
            std::chrono::duration<double, std::nano>(began - schedule_start).count() / interval_ns - phase);
        if (k >= 0 && static_cast<std::size_t>(k) < scheduled)
          service_us[at] = latency - issue_lag_us[static_cast<std::size_t>(k)];
      }
    }
    completed.fetch_add(1, std::memory_order_relaxed);
    // Release: the requester that sees the slot free sees the sample written.
    in_flight.fetch_sub(1, std::memory_order_release);
  }
};

// The callback every variant is given: trivially copyable and 16 bytes, so that no std::function
// of a competitor allocates for it.
struct Done {
  ThreadState *state;
  Clock::time_point began;
  void operator()(cudaError_t status) const noexcept { state->complete(status, began); }
};
static_assert(std::is_trivially_copyable_v<Done> && sizeof(Done) <= 16,
              "libstdc++'s std::function keeps such a callable in place");

template <CompletionSignal kSignal>
struct EvpoolVariant {
  static constexpr std::string_view kName = kSignal == CompletionSignal::kEventQuery ? "evpool" : "evpool-signal";
  explicit EvpoolVariant(int /*threads*/) {}
  void notify(int /*thread*/, cudaStream_t stream, Done done) { (void)queue.notify(stream, done); }
  std::optional<std::chrono::nanoseconds> cpu_time() const { return queue.poller_cpu_time(); }
  std::optional<std::uint64_t> queries() const { return queue.stats().queries; }
  CompletionQueue queue{CUDACompletionBackend(), CompletionQueueOptions{.signal = kSignal}};
};

// One poller is one core: where it is saturated, more queues (each with its poller thread) share
// the threads: thread t asks queue t % kQueues.
template <int kQueues>
struct EvpoolQueuesVariant {
  static constexpr std::string_view kName = kQueues == 2 ? "evpool-2-pollers" : "evpool-4-pollers";
  explicit EvpoolQueuesVariant(int /*threads*/) {}
  void notify(int thread, cudaStream_t stream, Done done) {
    (void)queues[thread % kQueues].notify(stream, done);
  }
  std::optional<std::chrono::nanoseconds> cpu_time() const {
    std::chrono::nanoseconds sum{0};
    for (const CompletionQueue &queue : queues) sum += queue.poller_cpu_time();
    return sum;
  }
  std::optional<std::uint64_t> queries() const {
    std::uint64_t sum = 0;
    for (const CompletionQueue &queue : queues) sum += queue.stats().queries;
    return sum;
  }
  CompletionQueue queues[kQueues];
};

struct HostFuncVariant {
  static constexpr std::string_view kName = "host-func";
  explicit HostFuncVariant(int /*threads*/) {}
  void notify(int /*thread*/, cudaStream_t stream, Done done) { completions.notify(stream, done); }
  std::optional<std::chrono::nanoseconds> cpu_time() const { return std::nullopt; }
  std::optional<std::uint64_t> queries() const { return std::nullopt; }
  competitors::HostFuncCompletions completions;
};

struct EventSyncVariant {
  static constexpr std::string_view kName = "event-sync-thread";
  explicit EventSyncVariant(int threads) : waiters(threads) {}
  void notify(int thread, cudaStream_t stream, Done done) { waiters.notify(thread, stream, done); }
  std::optional<std::chrono::nanoseconds> cpu_time() const { return waiters.cpu_time(); }
  std::optional<std::uint64_t> queries() const { return std::nullopt; }
  competitors::EventSyncThreads waiters;
};

struct FifoVariant {
  static constexpr std::string_view kName = "tf-fifo";
  explicit FifoVariant(int /*threads*/) {}
  // TensorFlow's callbacks take no status: an event in error is fatal there (and here).
  void notify(int /*thread*/, cudaStream_t stream, Done done) {
    poller.ThenExecute(stream, [done] { done(cudaSuccess); });
  }
  std::optional<std::chrono::nanoseconds> cpu_time() const { return poller.cpu_time(); }
  std::optional<std::uint64_t> queries() const { return poller.queries(); }
  competitors::FifoEventPoller poller;
};

struct PollAllVariant {
  static constexpr std::string_view kName = "pika-poll-all";
  explicit PollAllVariant(int /*threads*/) {}
  void notify(int /*thread*/, cudaStream_t stream, Done done) { poller.add_event_callback(done, stream); }
  std::optional<std::chrono::nanoseconds> cpu_time() const { return poller.cpu_time(); }
  std::optional<std::uint64_t> queries() const { return poller.queries(); }
  competitors::PollAllEvents poller;
};

// Every variant, in the order a point runs them. A variant is a struct like those above: kName, a
// constructor taking the number of requesting threads, notify(thread, stream, Done), cpu_time()
// and queries(). Listing it here is all it takes: both modes then run it when --variants names it.
template <class... Variants>
struct VariantList {
  // Calls f(std::type_identity<Variant>{}) for each variant, in order.
  template <class F>
  static void for_each(F &&f) {
    (f(std::type_identity<Variants>{}), ...);
  }
};
using AllVariants =
    VariantList<EvpoolVariant<CompletionSignal::kEventQuery>, EvpoolVariant<CompletionSignal::kAuto>,
                EvpoolQueuesVariant<2>, EvpoolQueuesVariant<4>, HostFuncVariant, EventSyncVariant, FifoVariant, PollAllVariant>;

// The open loop's reference: its closed-loop throughput at T threads is the saturation rate the
// loads are fractions of.
using SaturationVariant = EventSyncVariant;

// What each requesting thread works on, made once for the most threads and shared by the points.
struct Gpu {
  std::vector<cudaStream_t> streams;
  std::vector<void *> buffers;
  explicit Gpu(int threads) : streams(static_cast<std::size_t>(threads)), buffers(streams.size()) {
    for (cudaStream_t &stream : streams)
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    for (void *&buffer : buffers) check(cudaMalloc(&buffer, kMemsetBytes), "cudaMalloc");
  }
  ~Gpu() {
    for (cudaStream_t stream : streams) cudaStreamDestroy(stream);
    for (void *buffer : buffers) cudaFree(buffer);
  }
};

// Spins a little, then yields: with more requesting threads than cores, a pure spin would take
// the cores the mechanisms' own threads need.
void wait_below(const std::atomic<int> &in_flight, int bound) {
  // Acquire: pairs with the callback's release.
  for (unsigned spins = 0; in_flight.load(std::memory_order_acquire) >= bound; ++spins) {
    if (spins < 64)
      detail::cpu_relax();
    else
      std::this_thread::yield();
  }
}

double percentile(std::vector<float> &values, double p) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

// Appends the latency samples of `threads` states to `out`, after checking that no callback was
// told an error; warns if some did not fit the states' preallocated arrays.
void take_samples(ThreadState *states, int threads, std::vector<float> &out) {
  std::size_t dropped = 0;
  for (int t = 0; t < threads; ++t) {
    ThreadState &state = states[static_cast<std::size_t>(t)];
    if (const int error = state.error.load(std::memory_order_relaxed); error != cudaSuccess)
      check(static_cast<cudaError_t>(error), "a completion callback");
    const std::size_t taken = state.samples.load(std::memory_order_relaxed);
    const std::size_t kept = std::min(taken, state.latency_us.size());
    dropped += taken - kept;
    out.insert(out.end(), state.latency_us.begin(), state.latency_us.begin() + static_cast<std::ptrdiff_t>(kept));
  }
  if (dropped != 0)
    std::fprintf(stderr, "warning: %zu latency samples over the preallocated arrays were not kept\n", dropped);
}

struct Point {
  double completions_per_s = 0;
  std::vector<float> latency_us;
  std::optional<double> cpu_busy, cpu_idle, queries_per_completion;
};

template <class Variant>
Point run_point(int threads, double seconds, double idle_seconds, Gpu &gpu) {
  auto states = std::make_unique<ThreadState[]>(static_cast<std::size_t>(threads));
  const auto capacity =
      std::max(kMinSamplesPerThread, static_cast<std::size_t>(seconds * kSamplesPerSecond / threads));
  for (int t = 0; t < threads; ++t) states[static_cast<std::size_t>(t)].latency_us.resize(capacity);
  const auto completed = [&] {
    std::uint64_t total = 0;
    for (int t = 0; t < threads; ++t)
      total += states[static_cast<std::size_t>(t)].completed.load(std::memory_order_relaxed);
    return total;
  };
  const auto cpu_seconds = [](const std::optional<std::chrono::nanoseconds> &cpu) {
    return std::chrono::duration<double>(*cpu).count();
  };

  Point point;
  {
    Variant variant(threads);
    std::atomic<bool> stop{false};
    std::barrier start(threads + 1);
    auto worker = [&](int t) {
      check(cudaSetDevice(0), "cudaSetDevice");
      ThreadState &state = states[static_cast<std::size_t>(t)];
      const cudaStream_t stream = gpu.streams[static_cast<std::size_t>(t)];
      void *const buffer = gpu.buffers[static_cast<std::size_t>(t)];
      auto request = [&] {
        wait_below(state.in_flight, kInFlight);
        state.in_flight.fetch_add(1, std::memory_order_relaxed);
        const auto began = Clock::now();
        check(cudaMemsetAsync(buffer, 1, kMemsetBytes, stream), "cudaMemsetAsync");
        variant.notify(t, stream, Done{&state, began});
      };
      // Warm-up: events, threads and the mechanism's buffers are made here, outside the timing.
      for (int i = 0; i < kWarmupRequests; ++i) request();
      wait_below(state.in_flight, 1);
      state.samples.store(0, std::memory_order_relaxed);
      start.arrive_and_wait();
      while (!stop.load(std::memory_order_relaxed)) request();
      wait_below(state.in_flight, 1);
    };
    std::vector<std::thread> requesters;
    for (int t = 0; t < threads; ++t) requesters.emplace_back(worker, t);
    start.arrive_and_wait();
    const auto began = Clock::now();
    const auto cpu_began = variant.cpu_time();
    const auto queries_began = variant.queries();
    const std::uint64_t completed_began = completed();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const std::uint64_t completed_ended = completed();
    const auto queries_ended = variant.queries();
    const auto cpu_ended = variant.cpu_time();
    const auto ended = Clock::now();
    stop.store(true, std::memory_order_relaxed);
    for (std::thread &thread : requesters) thread.join();

    const double window = std::chrono::duration<double>(ended - began).count();
    const auto completions = static_cast<double>(completed_ended - completed_began);
    point.completions_per_s = completions / window;
    if (cpu_began && cpu_ended) point.cpu_busy = (cpu_seconds(cpu_ended) - cpu_seconds(cpu_began)) / window;
    if (queries_began && queries_ended && completions > 0)
      point.queries_per_completion = static_cast<double>(*queries_ended - *queries_began) / completions;

    // Idle: every request is done and every requester gone; the mechanism is left to itself.
    const auto idle_began = Clock::now();
    const auto cpu_idle_began = variant.cpu_time();
    std::this_thread::sleep_for(std::chrono::duration<double>(idle_seconds));
    const auto cpu_idle_ended = variant.cpu_time();
    const double idle = std::chrono::duration<double>(Clock::now() - idle_began).count();
    if (cpu_idle_began && cpu_idle_ended)
      point.cpu_idle = (cpu_seconds(cpu_idle_ended) - cpu_seconds(cpu_idle_began)) / idle;
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // host functions' tails included

  take_samples(states.get(), threads, point.latency_us);
  return point;
}

std::string figure(const std::optional<double> &value, const char *format) {
  if (!value) return "na";
  char text[32];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

template <class Variant>
void run_variant(const std::vector<std::string> &variants, int threads, double seconds, double idle_seconds,
                 Gpu &gpu) {
  if (std::find(variants.begin(), variants.end(), Variant::kName) == variants.end()) return;
  Point point = run_point<Variant>(threads, seconds, idle_seconds, gpu);
  std::printf("%s threads=%d completions_per_s=%.0f latency_median_us=%.1f latency_p99_us=%.1f poller_cpu_busy=%s "
              "poller_cpu_idle=%s queries_per_completion=%s\n",
              std::string(Variant::kName).c_str(), threads, point.completions_per_s,
              percentile(point.latency_us, 0.5), percentile(point.latency_us, 0.99),
              figure(point.cpu_busy, "%.3f").c_str(), figure(point.cpu_idle, "%.3f").c_str(),
              figure(point.queries_per_completion, "%.2f").c_str());
  std::fflush(stdout);
}

// ---- Open loop ----

// A requesting thread waits (for a slot) once this many of its requests are in flight: only a
// mechanism that has fallen far behind gets there, and the bound keeps its backlog (events,
// requests, the streams' queues) finite. Requests due meanwhile are issued late, their latency
// still counted from their due time.
constexpr int kOpenLoopMaxInFlight = 256;
// The first requests are due this long after the barrier lets the threads go: long enough for all
// of them to be awake.
constexpr std::chrono::milliseconds kOpenLoopLead{2};
// A thread that is still issuing requests due in the window this long after the window ended (a
// mechanism that cannot keep up) gives up on the rest: each counts as abandoned, with an infinite
// latency, so that a point of an overloaded mechanism takes at most about twice its window.
constexpr double kOpenLoopGraceWindows = 1.0;
// The threads' phases come from this seed, so every variant at a point gets the same schedule.
constexpr std::uint64_t kPhaseSeed = 37;

// Sleeps until `when` on the absolute clock, so that a late wake-up does not push the next due
// time back. steady_clock is CLOCK_MONOTONIC in libstdc++ and libc++ on Linux.
void sleep_until(Clock::time_point when) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
  const timespec at{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
  }
}

std::chrono::nanoseconds process_cpu_time() {
  timespec used{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &used) != 0) {
    std::perror("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    std::exit(1);
  }
  return std::chrono::seconds(used.tv_sec) + std::chrono::nanoseconds(used.tv_nsec);
}

struct OpenPoint {
  double offered_per_s = 0, completions_per_s = 0, process_cpu = 0;
  std::size_t abandoned = 0;  // requests due in the window but never issued (see kOpenLoopGraceWindows)
  std::vector<float> latency_us, service_us, issue_lag_us;
  std::optional<double> cpu_busy;
};

// One open-loop point: `threads` threads, each issuing `rate_per_thread` requests a second on its
// fixed schedule for `seconds` (see the file's header).
template <class Variant>
OpenPoint run_open_point(int threads, double rate_per_thread, double seconds, Gpu &gpu) {
  const double interval_ns = 1e9 / rate_per_thread;
  const auto window = std::chrono::nanoseconds(std::llround(seconds * 1e9));
  // Due times are (k + phase) * interval after the start, for k = 0, 1, ... while below `window`.
  std::vector<double> phases(static_cast<std::size_t>(threads));
  std::mt19937_64 random(kPhaseSeed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (double &phase : phases) phase = uniform(random);
  const auto due_at = [&](int t, std::uint64_t k) {
    return std::chrono::nanoseconds(
        std::llround((static_cast<double>(k) + phases[static_cast<std::size_t>(t)]) * interval_ns));
  };
  const auto most_per_thread = static_cast<std::size_t>(static_cast<double>(window.count()) / interval_ns) + 2;

  auto states = std::make_unique<ThreadState[]>(static_cast<std::size_t>(threads));
  std::vector<std::vector<float>> lags(static_cast<std::size_t>(threads));  // each its thread's
  for (int t = 0; t < threads; ++t) {
    states[static_cast<std::size_t>(t)].latency_us.resize(
        std::max(most_per_thread, static_cast<std::size_t>(kWarmupRequests)));
    states[static_cast<std::size_t>(t)].service_us.resize(most_per_thread);
    lags[static_cast<std::size_t>(t)].resize(most_per_thread);
  }
  std::vector<std::size_t> issued(static_cast<std::size_t>(threads), 0), abandoned(issued);

  OpenPoint point;
  {
    Variant variant(threads);
    // Written by the barrier's completion, which happens before any thread returns from it.
    Clock::time_point start{};
    const auto set_start = [&start]() noexcept { start = Clock::now() + kOpenLoopLead; };
    std::barrier go(threads + 1, set_start);
    const auto grace = std::chrono::duration_cast<Clock::duration>(window * kOpenLoopGraceWindows);
    auto worker = [&](int t) {
      check(cudaSetDevice(0), "cudaSetDevice");
      // 1 us, not the default 50 us: the sleeps until a due time are tens of microseconds.
      (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
      ThreadState &state = states[static_cast<std::size_t>(t)];
      std::vector<float> &lag = lags[static_cast<std::size_t>(t)];
      const cudaStream_t stream = gpu.streams[static_cast<std::size_t>(t)];
      void *const buffer = gpu.buffers[static_cast<std::size_t>(t)];
      // Warm-up, as the closed loop's: events, threads and buffers are made here, outside the timing.
      for (int i = 0; i < kWarmupRequests; ++i) {
        wait_below(state.in_flight, kInFlight);
        state.in_flight.fetch_add(1, std::memory_order_relaxed);
        const auto began = Clock::now();
        check(cudaMemsetAsync(buffer, 1, kMemsetBytes, stream), "cudaMemsetAsync");
        variant.notify(t, stream, Done{&state, began});
      }
      wait_below(state.in_flight, 1);
      state.samples.store(0, std::memory_order_relaxed);
      go.arrive_and_wait();
      const Clock::time_point give_up = start + window + grace;
      state.window_begin = start;
      state.window_end = start + std::chrono::duration_cast<Clock::duration>(window);
      state.issue_lag_us = lag.data();
      state.scheduled = lag.size();
      state.schedule_start = start;
      state.interval_ns = interval_ns;
      state.phase = phases[static_cast<std::size_t>(t)];
      std::size_t k = 0;
      for (;; ++k) {
        const auto offset = due_at(t, k);
        if (offset >= window) break;
        const Clock::time_point due = start + std::chrono::duration_cast<Clock::duration>(offset);
        if (Clock::now() < due) sleep_until(due);
        wait_below(state.in_flight, kOpenLoopMaxInFlight);
        if (Clock::now() >= give_up) {
          for (std::size_t rest = k; due_at(t, rest) < window; ++rest)
            ++abandoned[static_cast<std::size_t>(t)];
          break;
        }
        state.in_flight.fetch_add(1, std::memory_order_relaxed);
        const auto now = Clock::now();
        if (k < lag.size()) lag[k] = std::chrono::duration<float, std::micro>(now - due).count();
        check(cudaMemsetAsync(buffer, 1, kMemsetBytes, stream), "cudaMemsetAsync");
        // Counted from the due time, not from `now`: see the file's header.
        variant.notify(t, stream, Done{&state, due});
      }
      issued[static_cast<std::size_t>(t)] = k;
      wait_below(state.in_flight, 1);
    };
    std::vector<std::thread> requesters;
    for (int t = 0; t < threads; ++t) requesters.emplace_back(worker, t);
    go.arrive_and_wait();
    sleep_until(start);
    const auto began = Clock::now();
    const auto cpu_began = variant.cpu_time();
    const auto process_began = process_cpu_time();
    sleep_until(start + window);
    const auto process_ended = process_cpu_time();
    const auto cpu_ended = variant.cpu_time();
    const auto ended = Clock::now();
    for (std::thread &thread : requesters) thread.join();

    // The CPU clocks are read by this thread when it wakes: where it woke late, they cover a
    // window shifted into the drain, and say so.
    const auto late = std::max(began - start, ended - (start + window));
    if (late > window / 100)
      std::fprintf(stderr, "warning: %s threads=%d: the CPU clocks were read up to %.0f us late\n",
                   std::string(Variant::kName).c_str(), threads,
                   std::chrono::duration<double, std::micro>(late).count());
    const double measured = std::chrono::duration<double>(ended - began).count();
    std::uint64_t completions = 0;
    for (int t = 0; t < threads; ++t)
      completions += states[static_cast<std::size_t>(t)].completed_in_window.load(std::memory_order_relaxed);
    point.completions_per_s = static_cast<double>(completions) / seconds;
    point.process_cpu = std::chrono::duration<double>(process_ended - process_began).count() / measured;
    if (cpu_began && cpu_ended)
      point.cpu_busy = std::chrono::duration<double>(*cpu_ended - *cpu_began).count() / measured;
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // host functions' tails included

  std::size_t total_due = 0;
  for (int t = 0; t < threads; ++t) {
    const std::size_t count =
        std::min(issued[static_cast<std::size_t>(t)], lags[static_cast<std::size_t>(t)].size());
    total_due += issued[static_cast<std::size_t>(t)] + abandoned[static_cast<std::size_t>(t)];
    point.abandoned += abandoned[static_cast<std::size_t>(t)];
    point.issue_lag_us.insert(point.issue_lag_us.end(), lags[static_cast<std::size_t>(t)].begin(),
                              lags[static_cast<std::size_t>(t)].begin() + static_cast<std::ptrdiff_t>(count));
  }
  point.offered_per_s = static_cast<double>(total_due) / seconds;
  take_samples(states.get(), threads, point.latency_us);
  for (int t = 0; t < threads; ++t) {
    const ThreadState &state = states[static_cast<std::size_t>(t)];
    const std::size_t kept = std::min(state.samples.load(std::memory_order_relaxed), state.service_us.size());
    point.service_us.insert(point.service_us.end(), state.service_us.begin(),
                            state.service_us.begin() + static_cast<std::ptrdiff_t>(kept));
  }
  // Never issued: later than anything measured.
  point.latency_us.insert(point.latency_us.end(), point.abandoned, std::numeric_limits<float>::infinity());
  return point;
}

template <class Variant>
void run_open_variant(const std::vector<std::string> &variants, int threads, double load, double saturation,
                      double seconds, Gpu &gpu) {
  if (std::find(variants.begin(), variants.end(), Variant::kName) == variants.end()) return;
  OpenPoint point = run_open_point<Variant>(threads, load * saturation / threads, seconds, gpu);
  std::printf("open-loop variant=%s threads=%d load=%g saturation_per_s=%.0f offered_per_s=%.0f "
              "completions_per_s=%.0f latency_median_us=%.1f latency_p99_us=%.1f service_median_us=%.1f "
              "service_p99_us=%.1f issue_lag_median_us=%.1f issue_lag_p99_us=%.1f abandoned=%zu poller_cpu_busy=%s "
              "process_cpu=%.3f\n",
              std::string(Variant::kName).c_str(), threads, load, saturation, point.offered_per_s,
              point.completions_per_s, percentile(point.latency_us, 0.5), percentile(point.latency_us, 0.99),
              percentile(point.service_us, 0.5), percentile(point.service_us, 0.99),
              percentile(point.issue_lag_us, 0.5), percentile(point.issue_lag_us, 0.99), point.abandoned,
              figure(point.cpu_busy, "%.3f").c_str(), point.process_cpu);
  std::fflush(stdout);
}

// The saturation rate at `threads`: SaturationVariant's closed-loop throughput, or `given` if
// positive.
double saturation_rate(int threads, double seconds, double given, Gpu &gpu) {
  if (given > 0) {
    std::printf("saturation variant=%s threads=%d method=given completions_per_s=%.0f\n",
                std::string(SaturationVariant::kName).c_str(), threads, given);
    return given;
  }
  Point point = run_point<SaturationVariant>(threads, seconds, /*idle_seconds=*/0, gpu);
  std::printf("saturation variant=%s threads=%d method=closed-loop in_flight_per_thread=%d completions_per_s=%.0f "
              "latency_median_us=%.1f latency_p99_us=%.1f poller_cpu_busy=%s\n",
              std::string(SaturationVariant::kName).c_str(), threads, kInFlight, point.completions_per_s,
              percentile(point.latency_us, 0.5), percentile(point.latency_us, 0.99),
              figure(point.cpu_busy, "%.3f").c_str());
  std::fflush(stdout);
  if (point.completions_per_s <= 0) {
    std::fprintf(stderr, "the saturation run completed nothing\n");
    std::exit(1);
  }
  return point.completions_per_s;
}

std::vector<std::string> split(const char *list) {
  std::vector<std::string> parts;
  std::string part;
  for (const char *c = list;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!part.empty()) parts.push_back(part);
      part.clear();
      if (*c == '\0') break;
    } else {
      part += *c;
    }
  }
  return parts;
}

}  // namespace
}  // namespace evpool::bench

int main(int argc, char **argv) {
  using namespace evpool::bench;
  const char *const usage =
      "usage: evpool_completion_bench [--seconds S] [--threads 1,2,...] [--variants NAME,...] [--idle-seconds S]\n"
      "       evpool_completion_bench --open-loop [--seconds S] [--threads 16,128] [--loads 0.25,0.5,0.75]\n"
      "                               [--variants NAME,...] [--saturation-per-s R]\n";
  bool open_loop = false;
  double seconds = 0.5;
  double idle_seconds = 0.5;
  double saturation_given = 0;
  std::vector<std::string> thread_list;
  std::vector<std::string> load_list = {"0.25", "0.5", "0.75"};
  std::vector<std::string> variants = {"evpool",  "evpool-signal", "host-func", "event-sync-thread",
                                       "tf-fifo", "pika-poll-all"};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--open-loop") == 0) {
      open_loop = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
    const char *const value = argv[++i];
    if (std::strcmp(argv[i - 1], "--seconds") == 0)
      seconds = std::atof(value);
    else if (std::strcmp(argv[i - 1], "--idle-seconds") == 0)
      idle_seconds = std::atof(value);
    else if (std::strcmp(argv[i - 1], "--threads") == 0)
      thread_list = split(value);
    else if (std::strcmp(argv[i - 1], "--variants") == 0)
      variants = split(value);
    else if (std::strcmp(argv[i - 1], "--loads") == 0)
      load_list = split(value);
    else if (std::strcmp(argv[i - 1], "--saturation-per-s") == 0)
      saturation_given = std::atof(value);
    else {
      std::fprintf(stderr, "unknown option %s\n%s", argv[i - 1], usage);
      return 2;
    }
  }
  if (thread_list.empty())
    thread_list = open_loop ? std::vector<std::string>{"16", "128"}
                            : std::vector<std::string>{"1", "2", "4", "8", "16", "32", "64", "128"};
  // A misspelt name would silently run nothing: refuse it before the GPU is touched.
  for (const std::string &name : variants) {
    bool known = false;
    AllVariants::for_each(
        [&]<class Variant>(std::type_identity<Variant>) { known = known || name == Variant::kName; });
    if (!known) {
      std::fprintf(stderr, "unknown variant %s\n", name.c_str());
      return 2;
    }
  }
  std::vector<double> loads;
  for (const std::string &text : load_list) {
    loads.push_back(std::atof(text.c_str()));
    if (!(loads.back() > 0)) {
      std::fprintf(stderr, "a load must be above 0: %s\n", text.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("completion bench skipped: no GPU\n");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  if (open_loop)
    std::printf("# %s, %ld CPUs online, open loop, %.2f s per point\n", properties.name,
                sysconf(_SC_NPROCESSORS_ONLN), seconds);
  else
    std::printf("# %s, %ld CPUs online, %.2f s per point, %.2f s idle\n", properties.name,
                sysconf(_SC_NPROCESSORS_ONLN), seconds, idle_seconds);
  int most = 0;
  for (const std::string &threads : thread_list) most = std::max(most, std::atoi(threads.c_str()));
  Gpu gpu(most);
  if (open_loop) {
    // This thread reads the window's clocks at its start and end: 1 us of timer slack, as the
    // requesters'.
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    for (const std::string &text : thread_list) {
      const int threads = std::atoi(text.c_str());
      const double saturation = saturation_rate(threads, seconds, saturation_given, gpu);
      for (const double load : loads)
        AllVariants::for_each([&]<class Variant>(std::type_identity<Variant>) {
          run_open_variant<Variant>(variants, threads, load, saturation, seconds, gpu);
        });
    }
    return 0;
  }
  for (const std::string &text : thread_list) {
    const int threads = std::atoi(text.c_str());
    AllVariants::for_each([&]<class Variant>(std::type_identity<Variant>) {
      run_variant<Variant>(variants, threads, seconds, idle_seconds, gpu);
    });
  }
  return 0;
}
