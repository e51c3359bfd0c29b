// evpool bench: what it costs a scheduler's threads to learn that a stream handed back is idle.
// Usage: evpool_stream_idleness_probe [--seconds S] [--threads 1,16,128] [--bytes B] [--runs R]
//
// Each of T threads owns two streams and works them in turn: a cudaMemsetAsync of B bytes (1 MiB
// by default), cudaStreamSynchronize, a hand-back, as the stream bench's "synced" workload does
// through a pool. The ways to learn, before a stream's next use, that its work is done:
//   none            nothing: the limit (what StreamReuse::kAtOnce costs)
//   query-at-get    cuStreamQuery before the memset (what a pool that asks on Get costs)
//   query-at-put    cuStreamQuery after the synchronisation (asking on the hand-back)
//   query-thread    a thread of its own queries the handed-back streams; a worker waits until its
//                   stream was found idle (how far one asking thread keeps up)
//   record-at-put   cudaEventRecord after the synchronisation (what a pool that records an event
//                   per hand-back pays; nothing reads it)
//   record-query    cudaEventRecord after the synchronisation, cuEventQuery of it before the next
//                   use (a pool that records an event per hand-back and asks it on the Get)
//   mark-at-put     cuStreamWriteValue32 of a sequence number into pinned host memory after the
//                   synchronisation, read from host memory before the next use (evpool's marks)
// One line per point: threads, way, units a second, median and 99th percentile of a unit's
// latency (from the memset's enqueue to the hand-back), the asking thread's queries a second, and
// how often a worker found its stream not yet known idle.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "evpool/cuda_error.h"

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, evpool::describe_cuda_error(error).c_str());
    std::exit(1);
  }
}

// The driver's calls, through the runtime's entry points (the library links no libcuda either).
struct Driver {
  PFN_cuStreamQuery_v2000 query = nullptr;
  PFN_cuStreamWriteValue32_v11070 write_value = nullptr;
  PFN_cuEventQuery_v2000 query_event = nullptr;
  Driver() {
    cudaDriverEntryPointQueryResult found{};
    void *address = nullptr;
    check(cudaGetDriverEntryPointByVersion("cuStreamQuery", &address, 2000, cudaEnableDefault, &found), "entry");
    query = reinterpret_cast<PFN_cuStreamQuery_v2000>(address);
    check(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &address, 11070, cudaEnableDefault, &found),
          "entry");
    write_value = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(address);
    check(cudaGetDriverEntryPointByVersion("cuEventQuery", &address, 2000, cudaEnableDefault, &found), "entry");
    query_event = reinterpret_cast<PFN_cuEventQuery_v2000>(address);
  }
};

enum class Way { kNone, kQueryAtGet, kQueryAtPut, kQueryThread, kRecordAtPut, kRecordQuery, kMarkAtPut };
constexpr const char *kNames[] = {"none",          "query-at-get", "query-at-put", "query-thread",
                                  "record-at-put", "record-query", "mark-at-put"};
constexpr int kWays = 7;

struct Point {
  double units_per_s, median_us, p99_us, thread_queries_per_s;
  long not_yet_idle;
};

double percentile(std::vector<double> &values, double p) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

Point run(const Driver &driver, Way way, int threads, double seconds, std::size_t bytes) {
  const std::size_t count = 2 * static_cast<std::size_t>(threads);
  constexpr std::size_t kSlotWords = 16;  // a mark per 64-byte line
  std::vector<cudaStream_t> streams(count);
  std::vector<cudaEvent_t> events(count);
  std::vector<void *> buffers(static_cast<std::size_t>(threads));
  for (cudaStream_t &stream : streams)
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  for (cudaEvent_t &event : events) check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event");
  for (void *&buffer : buffers) check(cudaMalloc(&buffer, bytes), "cudaMalloc");
  std::uint32_t *marks = nullptr;
  check(cudaHostAlloc(reinterpret_cast<void **>(&marks), count * kSlotWords * sizeof(std::uint32_t),
                      cudaHostAllocPortable | cudaHostAllocMapped),
        "cudaHostAlloc");
  std::memset(marks, 0, count * kSlotWords * sizeof(std::uint32_t));
  void *device_marks = nullptr;
  check(cudaHostGetDevicePointer(&device_marks, marks, 0), "cudaHostGetDevicePointer");
  std::vector<std::uint32_t> expected(count, 0);
  std::vector<std::atomic<bool>> known_idle(count);
  for (std::atomic<bool> &idle : known_idle) idle.store(true);

  std::atomic<bool> stop{false}, asker_stop{false};
  std::atomic<long> units{0}, thread_queries{0}, not_yet_idle{0};
  std::barrier start(threads + 1);
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(threads));
  auto worker = [&](int t) {
    check(cudaSetDevice(0), "cudaSetDevice");
    start.arrive_and_wait();
    long done = 0;
    for (unsigned turn = 0; !stop.load(std::memory_order_relaxed); ++turn) {
      const std::size_t i = 2 * static_cast<std::size_t>(t) + (turn & 1);
      const auto stream = streams[i];
      bool waited = false;
      if (way == Way::kQueryThread)
        while (!known_idle[i].load(std::memory_order_acquire) && !stop.load(std::memory_order_relaxed))
          waited = true;
      if (way == Way::kMarkAtPut)
        while (__atomic_load_n(&marks[i * kSlotWords], __ATOMIC_ACQUIRE) != expected[i]) waited = true;
      if (way == Way::kRecordQuery)
        while (driver.query_event(reinterpret_cast<CUevent>(events[i])) == CUDA_ERROR_NOT_READY)
          waited = true;
      if (waited) not_yet_idle.fetch_add(1, std::memory_order_relaxed);
      const auto began = Clock::now();
      if (way == Way::kQueryAtGet) (void)driver.query(reinterpret_cast<CUstream>(stream));
      check(cudaMemsetAsync(buffers[static_cast<std::size_t>(t)], static_cast<int>(turn & 0xff), bytes, stream),
            "cudaMemsetAsync");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      if (way == Way::kQueryAtPut) (void)driver.query(reinterpret_cast<CUstream>(stream));
      if (way == Way::kRecordAtPut || way == Way::kRecordQuery)
        check(cudaEventRecord(events[i], stream), "cudaEventRecord");
      if (way == Way::kQueryThread) known_idle[i].store(false, std::memory_order_release);
      if (way == Way::kMarkAtPut &&
          driver.write_value(reinterpret_cast<CUstream>(stream),
                             reinterpret_cast<CUdeviceptr>(device_marks) + i * kSlotWords * sizeof(std::uint32_t),
                             ++expected[i], CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuStreamWriteValue32 failed\n");
        std::exit(1);
      }
      latencies[static_cast<std::size_t>(t)].push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - began).count());
      ++done;
    }
    units.fetch_add(done);
  };
  auto asker = [&] {
    check(cudaSetDevice(0), "cudaSetDevice");
    while (!asker_stop.load(std::memory_order_relaxed))
      for (std::size_t i = 0; i < count; ++i) {
        if (known_idle[i].load(std::memory_order_acquire)) continue;
        const CUresult status = driver.query(reinterpret_cast<CUstream>(streams[i]));
        thread_queries.fetch_add(1, std::memory_order_relaxed);
        if (status == CUDA_SUCCESS) known_idle[i].store(true, std::memory_order_release);
      }
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(worker, t);
  std::thread asking;
  if (way == Way::kQueryThread) asking = std::thread(asker);
  start.arrive_and_wait();
  const auto began = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (std::thread &thread : workers) thread.join();
  const double wall = std::chrono::duration<double>(Clock::now() - began).count();
  asker_stop.store(true);
  if (asking.joinable()) asking.join();
  std::vector<double> all;
  for (auto &values : latencies) all.insert(all.end(), values.begin(), values.end());
  Point point{static_cast<double>(units.load()) / wall, percentile(all, 0.5), percentile(all, 0.99),
              static_cast<double>(thread_queries.load()) / wall, not_yet_idle.load()};
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (cudaStream_t stream : streams) check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (cudaEvent_t event : events) check(cudaEventDestroy(event), "cudaEventDestroy");
  for (void *buffer : buffers) check(cudaFree(buffer), "cudaFree");
  check(cudaFreeHost(marks), "cudaFreeHost");
  return point;
}

std::vector<int> split(const char *list) {
  std::vector<int> values;
  for (const char *at = list; *at != '\0';) {
    values.push_back(std::atoi(at));
    while (*at != '\0' && *at != ',') ++at;
    if (*at == ',') ++at;
  }
  return values;
}

}  // namespace

int main(int argc, char **argv) {
  double seconds = 0.5;
  std::size_t bytes = std::size_t{1} << 20;
  int runs = 3;
  std::vector<int> thread_counts = {1, 16, 128};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--bytes") == 0) bytes = static_cast<std::size_t>(std::atoll(argv[i + 1]));
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) thread_counts = split(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("stream idleness probe skipped: no GPU\n");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  const Driver driver;
  // The runs interleave the ways, so that a drift of the machine's state spreads over all of them.
  for (int run_index = 0; run_index < runs; ++run_index)
    for (const int threads : thread_counts)
      for (int way = 0; way < kWays; ++way) {
        const Point point = run(driver, static_cast<Way>(way), threads, seconds, bytes);
        std::printf("run=%d threads=%d way=%s units_per_s=%.0f median_us=%.1f p99_us=%.1f "
                    "thread_queries_per_s=%.0f not_yet_idle=%ld\n",
                    run_index, threads, kNames[way], point.units_per_s, point.median_us, point.p99_us,
                    point.thread_queries_per_s, point.not_yet_idle);
        std::fflush(stdout);
      }
  return 0;
}
