// evpool bench: hearing that GPU work is done, on a real GPU. Usage:
//   evpool_completion_bench [--seconds S] [--threads 1,2,4,...] [--variants evpool,host-func,...]
//                           [--idle-seconds S]
// Every point runs each variant in turn, on device 0. Each requesting thread has a stream of its
// own (cudaStreamNonBlocking) and a 4-byte device buffer; in a loop it enqueues a 4-byte
// cudaMemsetAsync and asks to hear when it is done, keeping at most 8 requests in flight: with 8
// outstanding it waits (pauses, then yields) on a counter of its own that the completions
// decrement. A warm-up of 256 requests per thread, drained, comes first; then all threads are
// released together by a barrier and ask for S seconds (0.5 by default); then they stop asking
// and wait until their requests are done. One line per point and variant:
//   <variant> threads=<n> completions_per_s=<x> latency_median_us=<x> latency_p99_us=<x>
//   poller_cpu_busy=<x|na> poller_cpu_idle=<x|na> queries_per_completion=<x|na>
//
// - completions_per_s: callbacks run during the timed window (release to stop), over its length.
// - latency: ENQUEUE-TO-CALLBACK, the definition of the table of peers: from just before
//   the request's cudaMemsetAsync is enqueued (steady_clock, read by the requesting thread) to the
//   first thing its completion callback does (steady_clock again, on whatever thread runs it).
//   So it holds the enqueue, the GPU's work, the notification's own delay and the callback
//   thread's wake-up. Every request made after the release counts, those that finish while the
//   threads drain included; median and 99th percentile over all threads.
// - poller_cpu_busy: CPU time of the mechanism's own threads during the timed window, over its
//   length, in cores (a mechanism with a thread per stream can exceed 1); poller_cpu_idle: the
//   same over --idle-seconds (0.5 by default) once every request is done and the requesters have
//   exited. na where no thread of the mechanism is ours to clock (host-func: the driver's thread).
// - queries_per_completion: event queries the mechanism made during the timed window per
//   completion in it; na where it makes none (host-func, event-sync-thread). evpool's completion
//   signals are reads of host memory, not queries: with them the figure falls towards 0.
//
// Variants:
//   evpool             evpool::CompletionQueue, default options (its own poller thread, completion
//                      signals where the device can: CompletionSignal::kAuto), events from
//                      CUDAEventPool::instance()
//   evpool-query       the same with CompletionSignal::kEventQuery: every completion heard through
//                      an event query, as before the signals
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
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
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
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
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

  void complete(cudaError_t status, Clock::time_point began) noexcept {
    const auto now = Clock::now();
    if (status != cudaSuccess) {
      int none = cudaSuccess;
      error.compare_exchange_strong(none, status, std::memory_order_relaxed);
    }
    // Relaxed: the samples are read after the requester has seen in_flight fall (acquire) and
    // has been joined.
    const std::size_t at = samples.fetch_add(1, std::memory_order_relaxed);
    if (at < latency_us.size())
      latency_us[at] = std::chrono::duration<float, std::micro>(now - began).count();
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
  static constexpr std::string_view kName = kSignal == CompletionSignal::kAuto ? "evpool" : "evpool-query";
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

  std::size_t dropped = 0;
  for (int t = 0; t < threads; ++t) {
    ThreadState &state = states[static_cast<std::size_t>(t)];
    if (const int error = state.error.load(std::memory_order_relaxed); error != cudaSuccess)
      check(static_cast<cudaError_t>(error), "a completion callback");
    const std::size_t taken = state.samples.load(std::memory_order_relaxed);
    const std::size_t kept = std::min(taken, state.latency_us.size());
    dropped += taken - kept;
    point.latency_us.insert(point.latency_us.end(), state.latency_us.begin(),
                            state.latency_us.begin() + static_cast<std::ptrdiff_t>(kept));
  }
  if (dropped != 0)
    std::fprintf(stderr, "warning: %zu latency samples over the preallocated %zu per thread were not kept\n",
                 dropped, capacity);
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
  double seconds = 0.5;
  double idle_seconds = 0.5;
  std::vector<std::string> thread_list = {"1", "2", "4", "8", "16", "32", "64", "128"};
  std::vector<std::string> variants = {"evpool",  "evpool-query", "host-func", "event-sync-thread",
                                       "tf-fifo", "pika-poll-all"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--idle-seconds") == 0) idle_seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) thread_list = split(argv[i + 1]);
    if (std::strcmp(argv[i], "--variants") == 0) variants = split(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("completion bench skipped: no GPU\n");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  std::printf("# %s, %ld CPUs online, %.2f s per point, %.2f s idle\n", properties.name,
              sysconf(_SC_NPROCESSORS_ONLN), seconds, idle_seconds);
  int most = 0;
  for (const std::string &threads : thread_list) most = std::max(most, std::atoi(threads.c_str()));
  Gpu gpu(most);
  for (const std::string &text : thread_list) {
    const int threads = std::atoi(text.c_str());
    run_variant<EvpoolVariant<evpool::CompletionSignal::kAuto>>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<EvpoolVariant<evpool::CompletionSignal::kEventQuery>>(variants, threads, seconds,
                                                                      idle_seconds, gpu);
    run_variant<EvpoolQueuesVariant<2>>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<EvpoolQueuesVariant<4>>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<HostFuncVariant>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<EventSyncVariant>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<FifoVariant>(variants, threads, seconds, idle_seconds, gpu);
    run_variant<PollAllVariant>(variants, threads, seconds, idle_seconds, gpu);
  }
  return 0;
}
