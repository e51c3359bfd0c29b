// GPU soak: many threads run every workload against one pool of real CUDA events and one of
// streams for a given time, with the invariants checked throughout.
// Usage: evpool_gpu_soak [--seconds N] [--threads N]
//
// Roles, by thread index modulo 5 (devices assigned round-robin over every visible GPU):
//   pair      lease a stream from the stream pool, memset 4 KiB on it, Get, record on the
//             stream, Put, end the lease with the memset still pending
//   burst     Get 8, record each on A and make B wait on it, Put all 8
//   producer  Get, record on A, hand to the next thread          } handoff
//   consumer  make B wait on the handed event, Put it with -1    }
//   verify    write a value on A, record, make B wait, copy the value back on B and compare;
//             every 64th operation a capture instead: see below
// Thread 0 also purges both pools every 1,000 operations.
// Completions: every 16th operation of each role also asks the soak's CompletionQueue (over an
// event pool of its own) to hear when the stream the operation used is done (pair: the leased
// stream, before the lease ends; burst, producer: A; consumer, verify: B), unless 1,024 of the
// thread's requests are still in progress (then it skips this one, and counts the skip: the soak
// is not throttled to the poller's pace). The callback counts, and counts statuses other than
// cudaSuccess.
// A capture (ThreadLocal mode, on three streams of the thread's own): the origin clears the buffer,
// forks two branches through evpool::wait's steps, each branch writes its half with the value,
// the origin joins both back and ends with a graph-owned event (record_external's steps). The
// executable graph is launched 4 times on A, B waits on the event after each launch and copies
// both halves' last words back, then it is destroyed: its events (each captured wait's and the
// graph-owned one, all the graph's) come back to the pool through the deferred work, on whichever
// thread runs it next. (evpool::wait and record_external are these
// very steps over CUDAEventPool; the soak's pool counts its backend's events, so it calls the
// steps, detail/capture_aware_wait.h, over it directly.)
// Checked: no event or stream is held by two holders at once, no stream is leased with work
// pending (cudaStreamQuery), every leased stream is of the device asked for, every CUDA call
// succeeds (recording an event of the wrong device fails), every copy on B sees the value written on A before the record (or by
// the graph's launch before the wait), every capture ends, and none is lost: once everything is
// returned (graph-owned events are awaited, 5 s at most) and purged, created = destroyed in both
// pools. Each pool's stats() must then agree with its counting backend (created, destroyed) and
// show nothing idle or out. Once the queue is destroyed (which waits for every request), each
// request's callback has run, with cudaSuccess (callbacks = requests), every request took one
// event from the queue's pool (gets = requests) and every event is back (none outstanding).
// Exit status: 0 clean, 1 a violation, 77 no GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_backend.h"
#include "evpool/detail/capture_aware_wait.h"
#include "evpool/detail/cuda_streams.h"
#include "support/counting_backend.h"

namespace {

using Backend = evpool::testing_support::CountingBackend<evpool::CUDAEventBackend>;
using Pool = evpool::BasicHandlePool<Backend>;
using StreamBackend = evpool::testing_support::CountingBackend<evpool::CUDAStreamBackend>;
using StreamPool = evpool::BasicHandlePool<StreamBackend>;
using evpool::CUDAEvent;
using evpool::DeviceStats;

// Who holds which handle (events and streams alike: both are pointers).
class HolderLedger {
 public:
  bool take(const void *event) {
    Shard &shard = shard_of(event);
    std::lock_guard<std::mutex> lock(shard.mutex);
    return shard.held.insert(event).second;
  }
  bool give_back(const void *event) {
    Shard &shard = shard_of(event);
    std::lock_guard<std::mutex> lock(shard.mutex);
    return shard.held.erase(event) == 1;
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_set<const void *> held;
  };
  Shard &shard_of(const void *event) {
    return shards_[(reinterpret_cast<std::uintptr_t>(event) >> 4) % kShards];
  }
  static constexpr std::size_t kShards = 64;
  Shard shards_[kShards];
};

struct Violations {
  std::atomic<std::uint64_t> held_twice{0}, returned_unheld{0}, cuda_errors{0}, wrong_values{0};
  std::atomic<std::uint64_t> failed_captures{0};  // a step threw, or the capture did not end
  std::atomic<std::uint64_t> busy_streams{0}, wrong_device_streams{0};  // as leased
  std::atomic<std::uint64_t> first_cuda_error{0};
};

struct Handoff {
  std::mutex mutex;
  std::deque<CUDAEvent> events;
  bool producer_done = false;  // guarded by mutex
};

enum Role { kPair, kBurst, kProducer, kConsumer, kVerify };
const char *const kRoleNames[] = {"pair", "burst", "producer", "consumer", "verify"};

constexpr std::uint64_t kCaptureEvery = 64;  // verify operations
constexpr int kLaunchesPerCapture = 4;
constexpr std::uint64_t kCompletionEvery = 16;           // operations of a thread
constexpr std::uint64_t kCompletionsInFlightMax = 1024;  // per thread

struct Completions {
  std::atomic<std::uint64_t> requests{0}, callbacks{0}, errors{0}, refused{0}, skipped{0};
  std::atomic<std::uint64_t> first_error{0};
};

}  // namespace

int main(int argc, char **argv) {
  int seconds = 300, threads = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu soak skipped: no GPU (%s)\n", evpool::describe_cuda_error(cudaGetLastError()).c_str());
    return 77;
  }

  Backend backend;
  Pool pool(backend);
  StreamBackend stream_backend;
  StreamPool stream_pool(stream_backend);
  HolderLedger ledger;
  Violations violations;
  std::vector<Handoff> handoffs(static_cast<std::size_t>(threads));
  std::vector<std::atomic<std::uint64_t>> operations(5);
  std::atomic<std::uint64_t> captures{0}, graph_launches{0};
  std::atomic<bool> stop{false};
  // Declared after everything its callbacks touch, and destroyed (waiting for every request)
  // before the final accounting.
  evpool::CUDAEventPool completion_pool;
  Completions completions;
  std::vector<std::atomic<std::uint64_t>> completions_in_flight(static_cast<std::size_t>(threads));
  std::optional<evpool::CompletionQueue> queue;
  queue.emplace(evpool::CUDACompletionBackend(completion_pool));

  auto check = [&](cudaError_t error) {
    if (error != cudaSuccess) {
      violations.cuda_errors.fetch_add(1);
      std::uint64_t none = 0;
      violations.first_cuda_error.compare_exchange_strong(none, static_cast<std::uint64_t>(error));
    }
  };
  auto take = [&](CUDAEvent &event) {
    if (!ledger.take(event.get())) violations.held_twice.fetch_add(1);
  };
  auto put = [&](CUDAEvent &&event, int device) {
    if (!ledger.give_back(event.get())) violations.returned_unheld.fetch_add(1);
    pool.Put(std::move(event), device);
  };

  // Thread t asks for a completion on `stream` after every kCompletionEvery-th operation (`count`).
  auto ask = [&](int t, cudaStream_t stream, std::uint64_t count) {
    if (count % kCompletionEvery != 0) return;
    std::atomic<std::uint64_t> &in_flight = completions_in_flight[static_cast<std::size_t>(t)];
    if (in_flight.load(std::memory_order_relaxed) >= kCompletionsInFlightMax) {
      completions.skipped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    in_flight.fetch_add(1, std::memory_order_relaxed);
    try {
      queue->notify(stream, [&completions, &in_flight](cudaError_t status) {
        in_flight.fetch_sub(1, std::memory_order_relaxed);
        completions.callbacks.fetch_add(1, std::memory_order_relaxed);
        if (status != cudaSuccess) {
          completions.errors.fetch_add(1, std::memory_order_relaxed);
          std::uint64_t none = 0;
          completions.first_error.compare_exchange_strong(none, static_cast<std::uint64_t>(status));
        }
      });
      completions.requests.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception &) {
      in_flight.fetch_sub(1, std::memory_order_relaxed);
      completions.refused.fetch_add(1);
    }
  };

  auto worker = [&](int t) {
    const int device = t % devices;
    Role role = static_cast<Role>(t % 5);
    if (role == kProducer && t + 1 == threads) role = kPair;  // no consumer after it
    check(cudaSetDevice(device));
    cudaStream_t a = nullptr, b = nullptr;
    check(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    check(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    std::uint32_t *buffer = nullptr, *host = nullptr;
    check(cudaMalloc(reinterpret_cast<void **>(&buffer), 1 << 20));
    check(cudaMallocHost(reinterpret_cast<void **>(&host), 2 * sizeof(std::uint32_t)));
    cudaStream_t graph_streams[3] = {};  // a capture's origin and its two branches
    if (role == kVerify)
      for (cudaStream_t &stream : graph_streams)
        check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    check(cudaSetDevice((device + 1) % devices));  // Get must not depend on the current device

    // One capture of the verify role (see the top): the buffer's halves written by two branches.
    evpool::detail::CudaStreams streams;
    auto capture_and_launch = [&](int byte) {
      constexpr std::size_t kHalf = 1 << 19;  // bytes
      constexpr std::size_t kHalfWords = kHalf / sizeof(std::uint32_t);
      check(cudaSetDevice(device));  // the graph is instantiated and launched on the streams' device
      const cudaError_t began = cudaStreamBeginCapture(graph_streams[0], cudaStreamCaptureModeThreadLocal);
      check(began);
      bool stepped = false;
      cudaEvent_t done = nullptr;
      cudaGraphExec_t exec = nullptr;
      if (began == cudaSuccess) {
        try {
          check(cudaMemsetAsync(buffer, 0xEE, 2 * kHalf, graph_streams[0]));
          for (int branch = 1; branch <= 2; ++branch) {
            evpool::detail::capture_aware_wait(streams, graph_streams[branch], graph_streams[0], pool);
            check(cudaMemsetAsync(reinterpret_cast<unsigned char *>(buffer) + (branch - 1) * kHalf, byte,
                                  kHalf, graph_streams[branch]));
          }
          for (int branch = 1; branch <= 2; ++branch)
            evpool::detail::capture_aware_wait(streams, graph_streams[0], graph_streams[branch], pool);
          done = evpool::detail::graph_owned_event(streams, graph_streams[0], pool, /*record=*/true).event;
          stepped = true;
        } catch (const std::exception &error) {
          if (violations.failed_captures.load() == 0)
            std::fprintf(stderr, "a capture's step threw: %s\n", error.what());
        }
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(graph_streams[0], &graph);
        check(ended);
        if (stepped && ended == cudaSuccess) check(cudaGraphInstantiate(&exec, graph, 0));
        // The executable graph alone keeps the events from here on.
        if (graph != nullptr) check(cudaGraphDestroy(graph));
      }
      if (exec == nullptr) {
        violations.failed_captures.fetch_add(1);
      } else {
        const std::uint32_t expected = 0x01010101u * static_cast<std::uint32_t>(byte);
        for (int launch = 0; launch < kLaunchesPerCapture; ++launch) {
          check(cudaGraphLaunch(exec, a));
          check(cudaStreamWaitEvent(b, done, 0));
          check(cudaMemcpyAsync(host, buffer + kHalfWords - 1, sizeof(std::uint32_t), cudaMemcpyDeviceToHost, b));
          check(cudaMemcpyAsync(host + 1, buffer + 2 * kHalfWords - 1, sizeof(std::uint32_t),
                                cudaMemcpyDeviceToHost, b));
          check(cudaStreamSynchronize(b));  // before the next launch clears the buffer
          if (host[0] != expected || host[1] != expected) violations.wrong_values.fetch_add(1);
        }
        check(cudaStreamSynchronize(a));
        check(cudaGraphExecDestroy(exec));
        captures.fetch_add(1, std::memory_order_relaxed);
        graph_launches.fetch_add(kLaunchesPerCapture, std::memory_order_relaxed);
      }
      check(cudaSetDevice((device + 1) % devices));
    };

    std::uint64_t count = 0;
    auto drain = [&] {
      check(cudaStreamSynchronize(a));
      check(cudaStreamSynchronize(b));
    };
    // A consumer runs on after the stop until its producer is done and the hand-off is empty.
    bool consumer_done = false;
    while (role == kConsumer ? !consumer_done : !stop.load(std::memory_order_relaxed)) {
      switch (role) {
        case kPair: {
          auto stream = stream_pool.Lease(device);
          if (!ledger.take(stream.get())) violations.held_twice.fetch_add(1);
          if (cudaStreamQuery(stream) != cudaSuccess) violations.busy_streams.fetch_add(1);
          int stream_device = -1;
          check(cudaStreamGetDevice(stream, &stream_device));
          if (stream_device != device) violations.wrong_device_streams.fetch_add(1);
          check(cudaSetDevice(device));
          check(cudaMemsetAsync(buffer, static_cast<int>(count & 0xff), 4096, stream));
          CUDAEvent event = pool.Get(device);
          take(event);
          check(cudaEventRecord(event, stream));
          put(std::move(event), device);
          ask(t, stream, count);
          if (!ledger.give_back(stream.get())) violations.returned_unheld.fetch_add(1);
          stream.reset();  // its memset may still be pending: the next Get must not hand it out
          check(cudaSetDevice((device + 1) % devices));
          break;
        }
        case kBurst: {
          CUDAEvent events[8];
          for (CUDAEvent &event : events) {
            event = pool.Get(device);
            take(event);
            check(cudaEventRecord(event, a));
            check(cudaStreamWaitEvent(b, event, 0));
          }
          for (CUDAEvent &event : events) put(std::move(event), -1);
          ask(t, a, count);
          break;
        }
        case kProducer: {
          Handoff &handoff = handoffs[static_cast<std::size_t>(t)];
          {
            std::lock_guard<std::mutex> lock(handoff.mutex);
            if (handoff.events.size() >= 64) {  // bound what is in flight
              std::this_thread::yield();
              continue;
            }
          }
          CUDAEvent event = pool.Get(device);
          take(event);
          check(cudaEventRecord(event, a));
          ask(t, a, count);
          std::lock_guard<std::mutex> lock(handoff.mutex);
          handoff.events.push_back(std::move(event));
          break;
        }
        case kConsumer: {
          Handoff &handoff = handoffs[static_cast<std::size_t>(t - 1)];
          CUDAEvent event;
          {
            std::lock_guard<std::mutex> lock(handoff.mutex);
            if (!handoff.events.empty()) {
              event = std::move(handoff.events.front());
              handoff.events.pop_front();
            } else {
              consumer_done = handoff.producer_done;
            }
          }
          if (!event) {
            std::this_thread::yield();
            continue;
          }
          check(cudaStreamWaitEvent(b, event, 0));
          put(std::move(event), -1);
          ask(t, b, count);
          break;
        }
        case kVerify: {
          const int byte = static_cast<int>((count * 7 + static_cast<std::uint64_t>(t)) & 0x7F);
          if (count % kCaptureEvery == kCaptureEvery - 1) {
            capture_and_launch(byte);
            break;
          }
          CUDAEvent event = pool.Get(device);
          take(event);
          check(cudaMemsetAsync(buffer, byte, 1 << 20, a));
          check(cudaEventRecord(event, a));
          check(cudaStreamWaitEvent(b, event, 0));
          check(cudaMemcpyAsync(host, buffer + (1 << 18) - 1, sizeof(std::uint32_t), cudaMemcpyDeviceToHost, b));
          put(std::move(event), device);
          ask(t, b, count);
          check(cudaStreamSynchronize(b));
          if (*host != 0x01010101u * static_cast<std::uint32_t>(byte)) violations.wrong_values.fetch_add(1);
          break;
        }
      }
      if (++count % 1024 == 0) drain();
      if (t == 0 && count % 1000 == 0) {
        pool.Purge();
        stream_pool.Purge();
      }
    }
    if (role == kProducer) {
      Handoff &handoff = handoffs[static_cast<std::size_t>(t)];
      std::lock_guard<std::mutex> lock(handoff.mutex);
      handoff.producer_done = true;
    }
    drain();
    operations[static_cast<std::size_t>(role)].fetch_add(count);
    check(cudaStreamDestroy(a));
    check(cudaStreamDestroy(b));
    for (cudaStream_t stream : graph_streams)
      if (stream != nullptr) check(cudaStreamDestroy(stream));
    check(cudaFree(buffer));
    check(cudaFreeHost(host));
  };

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(worker, t);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop.store(true);
  for (std::thread &thread : pool_threads) thread.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  queue.reset();  // waits for every request, running its callback
  const DeviceStats completion_figures = completion_pool.stats().total();
  const bool completions_clean = completions.requests > 0 && completions.callbacks == completions.requests &&
                                 completions.errors == 0 && completions.refused == 0 &&
                                 completion_figures.outstanding == 0 &&
                                 completion_figures.gets == completions.requests;

  // Graph-owned events come back asynchronously: CUDA destroys an executable graph's user objects
  // on one of its own threads shortly after cudaGraphExecDestroy, and stats() (Purge too) runs the
  // deferred work that returns their events. Give them 5 s before the final accounting.
  const auto returned_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (pool.stats().total().outstanding != 0 && std::chrono::steady_clock::now() < returned_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pool.Purge();
  stream_pool.Purge();
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();
  const std::uint64_t streams_created = stream_backend.created(), streams_destroyed = stream_backend.destroyed();
  const DeviceStats stream_figures = stream_pool.stats().total();
  const bool stream_stats_agree = stream_figures.created == streams_created &&
                                  stream_figures.destroyed == streams_destroyed && stream_figures.idle == 0 &&
                                  stream_figures.outstanding == 0 && stream_figures.puts == stream_figures.gets;
  // The pool's own figures must agree with the counting backend: every creation and destruction
  // counted once, nothing idle after the Purge, nothing outstanding once every thread gave back.
  const DeviceStats figures = pool.stats().total();
  const bool stats_agree = figures.created == created && figures.destroyed == destroyed &&
                           figures.idle == 0 && figures.outstanding == 0 && figures.puts == figures.gets &&
                           figures.gets_missed <= figures.created;
  std::uint64_t total = 0;
  std::printf("gpu soak: %.1f s, %d threads, %d device(s)\n", elapsed, threads, devices);
  for (int role = 0; role < 5; ++role) {
    std::printf("  %-8s %12llu operations\n", kRoleNames[role],
                static_cast<unsigned long long>(operations[static_cast<std::size_t>(role)].load()));
    total += operations[static_cast<std::size_t>(role)].load();
  }
  std::printf("  total    %12llu operations (%.2f M/s)\n", static_cast<unsigned long long>(total),
              total / elapsed / 1e6);
  std::printf("  captures %12llu (fork/join, graph-owned event), graph launches %llu, failed captures %llu\n",
              static_cast<unsigned long long>(captures.load()),
              static_cast<unsigned long long>(graph_launches.load()),
              static_cast<unsigned long long>(violations.failed_captures.load()));
  std::printf("  events created %llu, destroyed by the pool %llu, peak idle nodes %zu\n",
              static_cast<unsigned long long>(created), static_cast<unsigned long long>(destroyed),
              pool.node_count());
  std::printf("  stats(): created %llu, destroyed %llu, gets %llu (hit rate %.4f), puts %llu, idle %llu, "
              "outstanding %lld: %s\n",
              static_cast<unsigned long long>(figures.created),
              static_cast<unsigned long long>(figures.destroyed), static_cast<unsigned long long>(figures.gets),
              figures.gets == 0 ? 0.0 : static_cast<double>(figures.gets_hit) / static_cast<double>(figures.gets),
              static_cast<unsigned long long>(figures.puts), static_cast<unsigned long long>(figures.idle),
              static_cast<long long>(figures.outstanding), stats_agree ? "agree with the backend" : "DISAGREE");
  std::printf("  streams created %llu, destroyed by the pool %llu, leases %llu (hit rate %.4f), busy when "
              "leased %llu, of a wrong device %llu; stats(): %s\n",
              static_cast<unsigned long long>(streams_created), static_cast<unsigned long long>(streams_destroyed),
              static_cast<unsigned long long>(stream_figures.gets),
              stream_figures.gets == 0
                  ? 0.0
                  : static_cast<double>(stream_figures.gets_hit) / static_cast<double>(stream_figures.gets),
              static_cast<unsigned long long>(violations.busy_streams.load()),
              static_cast<unsigned long long>(violations.wrong_device_streams.load()),
              stream_stats_agree ? "agree with the backend" : "DISAGREE");
  std::printf("  held twice %llu, returned unheld %llu, CUDA errors %llu (first: %s), wrong values %llu\n",
              static_cast<unsigned long long>(violations.held_twice.load()),
              static_cast<unsigned long long>(violations.returned_unheld.load()),
              static_cast<unsigned long long>(violations.cuda_errors.load()),
              cudaGetErrorName(static_cast<cudaError_t>(violations.first_cuda_error.load())),
              static_cast<unsigned long long>(violations.wrong_values.load()));
  std::printf("  completions: requests %llu, callbacks %llu, errors %llu (first: %s), refused %llu, skipped %llu "
              "(%llu in flight per thread at most), events outstanding %lld, gets %llu: %s\n",
              static_cast<unsigned long long>(completions.requests.load()),
              static_cast<unsigned long long>(completions.callbacks.load()),
              static_cast<unsigned long long>(completions.errors.load()),
              cudaGetErrorName(static_cast<cudaError_t>(completions.first_error.load())),
              static_cast<unsigned long long>(completions.refused.load()),
              static_cast<unsigned long long>(completions.skipped.load()),
              static_cast<unsigned long long>(kCompletionsInFlightMax),
              static_cast<long long>(completion_figures.outstanding),
              static_cast<unsigned long long>(completion_figures.gets), completions_clean ? "clean" : "VIOLATION");
  const bool clean = completions_clean && violations.held_twice == 0 && violations.returned_unheld == 0 &&
                     violations.cuda_errors == 0 && violations.wrong_values == 0 &&
                     violations.failed_captures == 0 && created == destroyed && stats_agree &&
                     violations.busy_streams == 0 && violations.wrong_device_streams == 0 &&
                     streams_created == streams_destroyed && stream_stats_agree;
  std::printf("gpu soak: %s\n", clean ? "PASSED (no violation; created = destroyed in both pools; stats() agrees; "
                                        "every completion called back)"
                                      : "FAILED");
  return clean ? 0 : 1;
}
