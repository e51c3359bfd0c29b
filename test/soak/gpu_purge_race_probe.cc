// Where StreamPoolOnGpu.PurgeRacingGetsAndPutsLosesNothing (cuda_stream_pool_test.cc) spends its
// time: the test's pattern (threads lease a stream, query it, memset 64 KiB on it, hand it back
// through release() and Put, while the main thread purges with pauses), timed piece by piece.
// Usage: evpool_gpu_purge_race_probe [--threads N] [--purges N] [--pause-us N] [--bytes N]
//                                    [--before-seconds S]
// --before-seconds: first, for S seconds, the load of StreamsHandedBackBusyLevelOffWithinASecond
// (16 threads lease, memset 64 MiB and hand back busy, every 32nd synchronised) on a pool of its
// own, destroyed before the race begins: the GPU suite runs that test shortly before this one.
// Prints, every 20 purges, the slowest Purge so far and the pool's figures, then each thread's
// slowest Get and Put, the time to stop and join, the last Purge, and the raw cost of creating
// and destroying a stream. A watchdog ends the process after 120 s with what each thread is doing.
// Exit status: 0 ran (whatever it measured), 1 a CUDA error or a lost stream, 77 no GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "evpool/cuda_stream_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

enum Step : int { kGetting, kQuerying, kMemsetting, kPutting, kSynchronizing, kDone };
constexpr const char *kStepNames[] = {"in Get", "in cudaStreamQuery",       "in cudaMemsetAsync",
                                      "in Put", "in cudaDeviceSynchronize", "done"};

struct Worker {
  std::atomic<int> step{kGetting};
  std::atomic<std::uint64_t> rounds{0};
  double slowest_get_ms = 0, slowest_put_ms = 0, get_ms = 0, put_ms = 0, query_ms = 0, memset_ms = 0;
  std::uint64_t gets_over_1ms = 0, busy = 0, errors = 0;
};

void print_figures(const char *when, evpool::CUDAStreamPool &pool) {
  const evpool::DeviceStats f = pool.stats().total();
  std::printf("  %s: created %llu destroyed %llu gets %llu missed %llu idle %llu (caches %llu) busy set aside %llu\n",
              when, static_cast<unsigned long long>(f.created), static_cast<unsigned long long>(f.destroyed),
              static_cast<unsigned long long>(f.gets), static_cast<unsigned long long>(f.gets_missed),
              static_cast<unsigned long long>(f.idle), static_cast<unsigned long long>(f.idle_in_caches),
              static_cast<unsigned long long>(f.busy));
}

}  // namespace

int main(int argc, char **argv) {
  int threads_wanted = 8, purges = 200, pause_us = 500;
  double before_seconds = 0;
  std::size_t bytes = 64 << 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--threads")
      threads_wanted = static_cast<int>(value);
    else if (flag == "--purges")
      purges = static_cast<int>(value);
    else if (flag == "--pause-us")
      pause_us = static_cast<int>(value);
    else if (flag == "--bytes")
      bytes = static_cast<std::size_t>(value);
    else if (flag == "--before-seconds")
      before_seconds = std::strtod(argv[i + 1], nullptr);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU\n");
    return 77;
  }
  {  // the raw costs the pool pays on a miss and in a Purge
    std::vector<cudaStream_t> streams(1000);
    auto start = Clock::now();
    for (cudaStream_t &stream : streams)
      (void)cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, 0);
    const double create_us = ms_since(start);
    start = Clock::now();
    for (cudaStream_t stream : streams) (void)cudaStreamDestroy(stream);
    std::printf("raw: cudaStreamCreateWithPriority %.2f us, cudaStreamDestroy %.2f us (1000 each, idle)\n",
                create_us, ms_since(start));
  }

  if (before_seconds > 0) {
    const auto start = Clock::now();
    evpool::CUDAStreamPool pool;
    std::atomic<bool> stop{false};
    std::atomic<long> units{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t)
      threads.emplace_back([&] {
        (void)cudaSetDevice(0);
        void *memory = nullptr;
        const std::size_t size = std::size_t{64} << 20;
        (void)cudaMalloc(&memory, size);
        for (long unit = 1; !stop.load(std::memory_order_relaxed); ++unit) {
          evpool::CUDAStreamLease stream = pool.Get(0);
          (void)cudaMemsetAsync(memory, static_cast<int>(unit & 0xff), size, stream);
          if (unit % 32 == 0) (void)cudaStreamSynchronize(stream);
          units.fetch_add(1, std::memory_order_relaxed);
        }
        (void)cudaDeviceSynchronize();
        (void)cudaFree(memory);
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(before_seconds));
    stop.store(true);
    for (std::thread &thread : threads) thread.join();
    print_figures("before", pool);
    std::printf("before: %ld units in %.0f ms\n", units.load(), ms_since(start));
  }

  const auto begun = Clock::now();
  evpool::CUDAStreamPool pool;
  std::atomic<bool> stop{false}, finished{false};
  std::vector<Worker> workers(static_cast<std::size_t>(threads_wanted));
  std::atomic<const char *> main_step{"starting"};
  std::atomic<int> purge_now{0};
  std::thread watchdog([&] {
    for (int second = 0; second < 120 && !finished.load(); ++second)
      for (int tenth = 0; tenth < 10 && !finished.load(); ++tenth)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (finished.load()) return;
    std::printf("watchdog: 120 s; main %s, purge %d\n", main_step.load(), purge_now.load());
    for (std::size_t t = 0; t < workers.size(); ++t)
      std::printf("  thread %zu: %llu rounds, %s\n", t,
                  static_cast<unsigned long long>(workers[t].rounds.load()), kStepNames[workers[t].step.load()]);
    std::printf("  retired %llu\n", static_cast<unsigned long long>(pool.retired_streams(0)));
    std::fflush(stdout);
    std::_Exit(2);
  });

  std::vector<std::thread> threads;
  for (Worker &me : workers)
    threads.emplace_back([&] {
      if (cudaSetDevice(0) != cudaSuccess) ++me.errors;
      void *memory = nullptr;
      if (cudaMalloc(&memory, bytes) != cudaSuccess) ++me.errors;
      while (!stop.load(std::memory_order_relaxed)) {
        me.step.store(kGetting, std::memory_order_relaxed);
        auto start = Clock::now();
        evpool::CUDAStreamLease stream = pool.Get(0);
        double took = ms_since(start);
        me.get_ms += took;
        me.slowest_get_ms = std::max(me.slowest_get_ms, took);
        if (took > 1) ++me.gets_over_1ms;
        me.step.store(kQuerying, std::memory_order_relaxed);
        start = Clock::now();
        if (cudaStreamQuery(stream) != cudaSuccess) ++me.busy;
        me.query_ms += ms_since(start);
        me.step.store(kMemsetting, std::memory_order_relaxed);
        start = Clock::now();
        if (cudaMemsetAsync(memory, 2, bytes, stream) != cudaSuccess) ++me.errors;
        me.memset_ms += ms_since(start);
        me.step.store(kPutting, std::memory_order_relaxed);
        start = Clock::now();
        pool.Put(stream.release());
        took = ms_since(start);
        me.put_ms += took;
        me.slowest_put_ms = std::max(me.slowest_put_ms, took);
        me.rounds.fetch_add(1, std::memory_order_relaxed);
      }
      me.step.store(kSynchronizing, std::memory_order_relaxed);
      if (cudaDeviceSynchronize() != cudaSuccess) ++me.errors;
      if (cudaFree(memory) != cudaSuccess) ++me.errors;
      me.step.store(kDone, std::memory_order_relaxed);
    });

  double slowest_purge = 0, purging = 0, sleeping = 0;
  for (int purge = 0; purge < purges; ++purge) {
    purge_now.store(purge);
    main_step.store("in Purge");
    auto start = Clock::now();
    pool.Purge();
    const double took = ms_since(start);
    purging += took;
    slowest_purge = std::max(slowest_purge, took);
    main_step.store("sleeping");
    start = Clock::now();
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    sleeping += ms_since(start);
    if (purge % 20 == 19) {
      std::uint64_t rounds = 0;
      for (const Worker &worker : workers) rounds += worker.rounds.load();
      std::printf("purge %d at %.0f ms: this one %.2f ms, slowest %.2f ms, all %.0f ms, sleeping %.0f ms, rounds %llu\n",
                  purge + 1, ms_since(begun), took, slowest_purge, purging, sleeping,
                  static_cast<unsigned long long>(rounds));
      main_step.store("in stats()");
      print_figures("figures", pool);
      std::fflush(stdout);
    }
  }
  main_step.store("joining");
  auto start = Clock::now();
  stop.store(true);
  for (std::thread &thread : threads) thread.join();
  std::printf("stop and join: %.2f ms\n", ms_since(start));
  print_figures("before the last Purge", pool);
  main_step.store("in the last Purge");
  start = Clock::now();
  pool.Purge();
  std::printf("last Purge: %.2f ms\n", ms_since(start));
  const evpool::DeviceStats figures = pool.stats().total();
  finished.store(true);
  watchdog.join();

  std::uint64_t errors = 0, busy = 0;
  for (std::size_t t = 0; t < workers.size(); ++t) {
    const Worker &w = workers[t];
    const double n = static_cast<double>(std::max<std::uint64_t>(w.rounds.load(), 1));
    std::printf("thread %zu: %llu rounds; Get mean %.1f us slowest %.2f ms (%llu over 1 ms); Put mean %.1f us slowest "
                "%.2f ms; query mean %.1f us; memset mean %.1f us\n",
                t, static_cast<unsigned long long>(w.rounds.load()), 1000 * w.get_ms / n, w.slowest_get_ms,
                static_cast<unsigned long long>(w.gets_over_1ms), 1000 * w.put_ms / n, w.slowest_put_ms,
                1000 * w.query_ms / n, 1000 * w.memset_ms / n);
    errors += w.errors;
    busy += w.busy;
  }
  std::printf("total %.0f ms; errors %llu, handed out busy %llu; created %llu destroyed %llu outstanding %lld\n",
              ms_since(begun), static_cast<unsigned long long>(errors), static_cast<unsigned long long>(busy),
              static_cast<unsigned long long>(figures.created),
              static_cast<unsigned long long>(figures.destroyed), static_cast<long long>(figures.outstanding));
  const bool lost = figures.created != figures.destroyed || figures.outstanding != 0;
  return errors != 0 || busy != 0 || lost ? 1 : 0;
}
