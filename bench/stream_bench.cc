// evpool bench: stream pools on a real GPU. Usage:
//   evpool_stream_bench [--seconds S] [--threads 1,2,16,...] [--workloads pair,handoff,...]
// Every point runs each variant of bench/stream_variants.h in turn, on device 0, for S seconds
// (0.2 by default) after a warm-up, all threads released together; throughput is over the wall
// clock from the release to the last thread's stop. One line per point:
//   <workload> <variant> threads=<n> units_per_s=<x> [short_median_us=.. short_p99_us=..
//   long_median_us=..] created=<streams the variant created, where it counts them>
//
// Workloads, what each thread does per unit:
//   pair       acquire a stream, release it: the pool alone (evpool asks the stream once)
//   handoff    threads in pairs: 2k acquires batches of 64 and passes them to 2k+1, which
//              releases them (a completion thread); counted where they are released
//   loop       acquire, a 4-byte cudaMemsetAsync on it, release without waiting; every 256
//              units the thread waits for its last stream: small work on leased streams
//   synced     acquire, a cudaMemsetAsync of 1 MiB, cudaStreamSynchronize, release: ordinary
//              work, each stream handed back idle; the latency of each unit as in mixed
//   mixed      acquire, a cudaMemsetAsync of 64 KiB (short) or, one unit in 16, of 256 MiB
//              (long), cudaStreamSynchronize, release; the latency of each unit is from acquire
//              to the synchronisation's return. Where streams are shared (round-robin) a short
//              unit may queue behind another thread's long one: head-of-line blocking.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "evpool/cuda_error.h"
#include "batch_ring.h"
#include "stream_variants.h"

namespace evpool::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kShortBytes = 64 << 10;
constexpr std::size_t kSyncedBytes = 1 << 20;
constexpr std::size_t kLongBytes = std::size_t{256} << 20;
constexpr unsigned kLongEvery = 16;
constexpr std::size_t kHandoffBatch = 64;
constexpr std::size_t kHandoffWarmBatches = 16;
constexpr int kLoopBound = 256;

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, evpool::describe_cuda_error(error).c_str());
    std::exit(1);
  }
}

// Whether the variant ends a synced unit itself (evpool-synced), rather than with
// cudaStreamSynchronize and its release().
template <class Variant>
constexpr bool kSynchronisesItself = requires(Variant variant, typename Variant::Held held) {
  variant.synchronize_and_release(std::move(held));
};

// The end of a synced or mixed unit: wait for the stream's work, hand the stream back.
template <class Variant>
void synchronize_and_release(Variant &variant, typename Variant::Held &&held) {
  if constexpr (kSynchronisesItself<Variant>) {
    variant.synchronize_and_release(std::move(held));
  } else {
    check(cudaStreamSynchronize(Variant::stream(held)), "cudaStreamSynchronize");
    variant.release(std::move(held));
  }
}

struct Point {
  double units_per_s = 0;
  std::vector<double> short_us, long_us;  // mixed only
};

double percentile(std::vector<double> &values, double p) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

struct Buffers {
  void *long_buffer = nullptr;         // shared by every long unit (the content is not read)
  std::vector<void *> short_buffers;   // one per thread
  std::vector<void *> synced_buffers;  // one per thread
  explicit Buffers(int threads)
      : short_buffers(static_cast<std::size_t>(threads)), synced_buffers(static_cast<std::size_t>(threads)) {
    check(cudaMalloc(&long_buffer, kLongBytes), "cudaMalloc");
    for (void *&buffer : short_buffers) check(cudaMalloc(&buffer, kShortBytes), "cudaMalloc");
    for (void *&buffer : synced_buffers) check(cudaMalloc(&buffer, kSyncedBytes), "cudaMalloc");
  }
  ~Buffers() {
    cudaFree(long_buffer);
    for (void *buffer : short_buffers) cudaFree(buffer);
    for (void *buffer : synced_buffers) cudaFree(buffer);
  }
};

template <class Variant>
Point run_point(std::string_view workload, int threads, double seconds, Buffers &buffers) {
  Variant variant(threads);
  std::atomic<bool> stop{false};
  std::atomic<long> units{0};
  std::barrier start(threads + 1);
  std::vector<std::vector<double>> short_us(static_cast<std::size_t>(threads)), long_us(short_us.size());
  using Ring = BatchRing<cudaStream_t, kHandoffBatch, 4>;
  std::vector<std::unique_ptr<Ring>> rings;
  for (int pair = 0; pair < threads / 2; ++pair) rings.push_back(std::make_unique<Ring>());
  Clock::time_point stopped_at;
  std::atomic<int> running{threads};

  auto worker = [&](int t) {
    check(cudaSetDevice(0), "cudaSetDevice");
    std::mt19937 random(static_cast<unsigned>(t * 7919 + 1));
    void *small = buffers.short_buffers[static_cast<std::size_t>(t)];
    auto one_unit = [&] {
      if (workload == "pair") {
        auto held = variant.acquire(t, 0);
        variant.release(std::move(held));
      } else if (workload == "loop") {
        auto held = variant.acquire(t, 0);
        check(cudaMemsetAsync(small, 1, 4, Variant::stream(held)), "cudaMemsetAsync");
        variant.release(std::move(held));
      } else if (workload == "synced") {
        const auto began = Clock::now();
        auto held = variant.acquire(t, 0);
        const cudaStream_t stream = Variant::stream(held);
        check(cudaMemsetAsync(buffers.synced_buffers[static_cast<std::size_t>(t)], 3, kSyncedBytes, stream),
              "cudaMemsetAsync");
        synchronize_and_release(variant, std::move(held));
        short_us[static_cast<std::size_t>(t)].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - began).count());
      } else {  // mixed
        const bool long_unit = random() % kLongEvery == 0;
        const auto began = Clock::now();
        auto held = variant.acquire(t, 0);
        const cudaStream_t stream = Variant::stream(held);
        check(cudaMemsetAsync(long_unit ? buffers.long_buffer : small, 2,
                              long_unit ? kLongBytes : kShortBytes, stream),
              "cudaMemsetAsync");
        synchronize_and_release(variant, std::move(held));
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - began).count();
        (long_unit ? long_us : short_us)[static_cast<std::size_t>(t)].push_back(us);
      }
    };
    // Warm-up: the variant creates what the thread will use, outside the timing.
    for (int i = 0; i < 64 && workload != "handoff"; ++i) one_unit();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    short_us[static_cast<std::size_t>(t)].clear();
    long_us[static_cast<std::size_t>(t)].clear();
    if constexpr (requires { variant.hand_over(variant.acquire(t, 0)); }) {
      // Handoff's warm-up: the streams a pair keeps in flight are created here, not in the
      // timing (a stream takes microseconds to create).
      if (workload == "handoff") {
        Ring &ring = *rings[static_cast<std::size_t>(t / 2)];
        for (std::size_t i = 0; i < kHandoffBatch * kHandoffWarmBatches; ++i) {
          if (t % 2 == 0)
            ring.push(variant.hand_over(variant.acquire(t, 0)));
          else
            variant.take_back(ring.pop(), 0);
        }
      }
    }
    start.arrive_and_wait();
    long done = 0;
    if constexpr (requires { variant.hand_over(variant.acquire(t, 0)); }) {
      if (workload == "handoff") {
        Ring &ring = *rings[static_cast<std::size_t>(t / 2)];
        if (t % 2 == 0) {
          bool last = false;
          while (!last) {
            last = stop.load(std::memory_order_relaxed);
            for (std::size_t i = 0; i < kHandoffBatch; ++i)
              ring.push(last ? nullptr : variant.hand_over(variant.acquire(t, 0)));
          }
        } else {
          for (cudaStream_t handle = ring.pop();; handle = ring.pop()) {
            if (handle == nullptr) break;
            variant.take_back(handle, 0);
            ++done;
          }
          for (std::size_t i = 1; i < kHandoffBatch; ++i) (void)ring.pop();  // the rest of the last batch
        }
        units.fetch_add(done);
        running.fetch_sub(1);
        return;
      }
    }
    while (!stop.load(std::memory_order_relaxed)) {
      one_unit();
      if (workload == "loop" && ++done % kLoopBound == 0)
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (workload != "loop") ++done;
    }
    units.fetch_add(done);
    running.fetch_sub(1);
  };

  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(worker, t);
  start.arrive_and_wait();
  const auto began = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (std::thread &thread : pool_threads) thread.join();
  stopped_at = Clock::now();
  Point point;
  point.units_per_s =
      static_cast<double>(units.load()) / std::chrono::duration<double>(stopped_at - began).count();
  for (auto &values : short_us) point.short_us.insert(point.short_us.end(), values.begin(), values.end());
  for (auto &values : long_us) point.long_us.insert(point.long_us.end(), values.begin(), values.end());
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return point;
}

template <class Variant>
void run_variant(std::string_view workload, int threads, double seconds, Buffers &buffers) {
  if (workload == "handoff" && (threads < 2 || !requires(Variant v) { v.hand_over(v.acquire(0, 0)); }))
    return;
  if (workload != "synced" && workload != "mixed" && kSynchronisesItself<Variant>) return;
  Point point = run_point<Variant>(workload, threads, seconds, buffers);
  std::printf("%s %s threads=%d units_per_s=%.0f", std::string(workload).c_str(),
              std::string(Variant::kName).c_str(), threads, point.units_per_s);
  if (workload == "mixed")
    std::printf(" short_median_us=%.1f short_p99_us=%.1f long_median_us=%.1f", percentile(point.short_us, 0.5),
                percentile(point.short_us, 0.99), percentile(point.long_us, 0.5));
  if (workload == "synced")
    std::printf(" median_us=%.1f p99_us=%.1f", percentile(point.short_us, 0.5), percentile(point.short_us, 0.99));
  std::printf("\n");
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
  double seconds = 0.2;
  std::vector<std::string> thread_list = {"1", "2", "4", "16", "64", "128"};
  std::vector<std::string> workloads = {"pair", "handoff", "loop", "synced", "mixed"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) thread_list = split(argv[i + 1]);
    if (std::strcmp(argv[i], "--workloads") == 0) workloads = split(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("stream bench skipped: no GPU\n");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  int most = 0;
  for (const std::string &threads : thread_list) most = std::max(most, std::atoi(threads.c_str()));
  Buffers buffers(most);
  for (const std::string &workload : workloads)
    for (const std::string &text : thread_list) {
      const int threads = std::atoi(text.c_str());
      run_variant<EvpoolStreams>(workload, threads, seconds, buffers);
      run_variant<EvpoolAtOnceStreams>(workload, threads, seconds, buffers);
      run_variant<EvpoolSyncedStreams>(workload, threads, seconds, buffers);
      run_variant<SpinlockStreams>(workload, threads, seconds, buffers);
      run_variant<MutexStreams>(workload, threads, seconds, buffers);
      run_variant<RoundRobinStreamVariant>(workload, threads, seconds, buffers);
      run_variant<PrivateStreams>(workload, threads, seconds, buffers);
    }
  return 0;
}
