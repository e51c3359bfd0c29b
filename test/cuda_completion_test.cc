// CompletionQueue on a real GPU, with work of chosen length (the PTX spin kernel of
// support/ptx_kernels.h): many threads asking on streams of their own, each callback once and in
// the order of its stream's requests, the events all back in the queue's pool; callbacks that
// call CUDA and ask for more; wait(); a capturing stream refused without harm to its capture; the
// destructor waiting for work in progress; a queue polled by its caller; a stream destroyed with
// work running whose handle the next stream gets, never finishing the old stream's request early
// (with event queries and with signals);
// the special handles caught up in order; completion signals finishing a stream without a query,
// their callbacks seeing the work's writes, against kEventQuery; and a sticky error, in a child
// process of its own (completion_error_scenario.cc), with event queries and with signals. Every
// queue but those told otherwise has the default options (event queries). Each skips without a
// GPU.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_availability.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_event_pool.h"
#include "support/ptx_kernels.h"

extern char **environ;

namespace evpool {
namespace {

using namespace std::chrono_literals;
using testing_support::PtxKernels;

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
#define EXPECT_CUDA(call) EXPECT_EQ((call), cudaSuccess) << #call

#define REQUIRE_KERNELS(kernels) ASSERT_EQ((kernels).error(), cudaSuccess) << (kernels).why()

// Waits for `completion` without blocking forever: true once it is ready, false after `limit`.
bool ready_within(const Completion &completion, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!completion.ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// A stream of device 0, destroyed with the object (after its work, which the tests wait for).
struct Stream {
  Stream() { EXPECT_CUDA(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking)); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  ~Stream() { EXPECT_CUDA(cudaStreamDestroy(handle)); }
  operator cudaStream_t() const { return handle; }
  cudaStream_t handle = nullptr;
};

// Each test gives its queue a pool of its own, so that the pool's figures are the queue's alone.
// A queue is declared after everything its callbacks touch: should a test end early, its
// destructor still runs the pending callbacks.
class CompletionQueueOnGpu : public testing::Test {
 protected:
  void SetUp() override {
    EVPOOL_REQUIRE_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    pool_ = std::make_unique<CUDAEventPool>();
    kernels_ = std::make_unique<PtxKernels>();
    REQUIRE_KERNELS(*kernels_);
  }
  void TearDown() override {
    if (pool_ != nullptr) {
      EXPECT_CUDA(cudaDeviceSynchronize());  // before the kernels are unloaded
    }
  }

  // The body of the handle-reuse test below, with one way of hearing completions.
  void expect_the_old_stream_not_finished_by_the_new(CompletionSignal signal);

  std::unique_ptr<CUDAEventPool> pool_;
  std::unique_ptr<PtxKernels> kernels_;
};

// 16 threads, a stream each, 500 requests each, after a spin of 0 to 50 us (four in five) or a
// 4-byte memset copied back to pinned host memory (one in five). Each callback sees its stream's
// requests in order, runs once, with cudaSuccess, and (for a memset) sees the value copied back.
// Once each stream's last request is ready, so is every earlier one; and every event is back.
TEST_F(CompletionQueueOnGpu, ManyThreadsWithWorkOfVariedLengthGetEveryCallbackOnceInTheOrderOfTheirStream) {
  constexpr int kThreads = 16, kRequests = 500;
  constexpr std::size_t kTotal = std::size_t{kThreads} * kRequests;
  std::vector<Stream> streams(kThreads);
  std::uint32_t *device_words = nullptr, *host_words = nullptr;  // one per request
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&device_words), kTotal * sizeof(std::uint32_t)));
  ASSERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&host_words), kTotal * sizeof(std::uint32_t)));
  for (std::size_t i = 0; i < kTotal; ++i) host_words[i] = 0;

  std::vector<std::atomic<int>> runs(kTotal);
  std::vector<std::atomic<int>> next_of_stream(kThreads);  // the sequence number expected next
  std::atomic<long> callbacks{0}, out_of_order{0}, failed{0}, wrong_values{0}, cuda_errors{0};
  std::vector<std::vector<Completion>> handles(kThreads);
  CompletionQueue queue{CUDACompletionBackend(*pool_)};

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (cudaSetDevice(0) != cudaSuccess) ++cuda_errors;
      std::mt19937 random(static_cast<unsigned>(t) + 1);
      std::uniform_int_distribution<int> spin_ns(0, 50'000), kind(0, 4);
      handles[t].reserve(kRequests);
      for (int seq = 0; seq < kRequests; ++seq) {
        const std::size_t id = static_cast<std::size_t>(t) * kRequests + static_cast<std::size_t>(seq);
        const std::uint8_t byte = static_cast<std::uint8_t>(1 + id % 255);
        const bool copied_back = kind(random) == 0;
        if (copied_back) {
          if (cudaMemsetAsync(device_words + id, byte, sizeof(std::uint32_t), streams[t]) != cudaSuccess ||
              cudaMemcpyAsync(host_words + id, device_words + id, sizeof(std::uint32_t),
                              cudaMemcpyDeviceToHost, streams[t]) != cudaSuccess)
            ++cuda_errors;
        } else if (kernels_->spin(streams[t], std::chrono::nanoseconds(spin_ns(random))) != cudaSuccess) {
          ++cuda_errors;
        }
        handles[t].push_back(queue.notify(streams[t], [&, t, seq, id, byte, copied_back](cudaError_t status) {
          ++callbacks;
          runs[id].fetch_add(1, std::memory_order_relaxed);
          if (next_of_stream[t].exchange(seq + 1, std::memory_order_relaxed) != seq) ++out_of_order;
          if (status != cudaSuccess) ++failed;
          if (copied_back && host_words[id] != 0x01010101u * byte) ++wrong_values;
        }));
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  ASSERT_EQ(cuda_errors.load(), 0) << "enqueuing the work failed";

  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(ready_within(handles[t].back(), 30s)) << "thread " << t << "'s last request is not done after 30 s";
    for (int seq = 0; seq < kRequests; ++seq) {
      const Completion &handle = handles[t][static_cast<std::size_t>(seq)];
      ASSERT_TRUE(handle.ready()) << "thread " << t << ", request " << seq
                                  << ": not ready although a later request of its stream is";
      EXPECT_EQ(handle.status(), cudaSuccess) << "thread " << t << ", request " << seq;
      EXPECT_EQ(handle.callback_exception(), nullptr);
    }
  }
  EXPECT_EQ(callbacks.load(), static_cast<long>(kTotal));
  for (std::size_t id = 0; id < kTotal; ++id) ASSERT_EQ(runs[id].load(), 1) << "request " << id;
  EXPECT_EQ(out_of_order.load(), 0) << "callbacks of one stream ran out of the order of its requests";
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong_values.load(), 0) << "a callback ran before its memset's value was copied back";
  const CompletionQueueStats stats = queue.stats();
  EXPECT_EQ(stats.requests, kTotal);
  EXPECT_EQ(stats.completions, kTotal);
  EXPECT_EQ(stats.callback_exceptions, 0u);
  const DeviceStats figures = pool_->stats().total();
  EXPECT_EQ(figures.outstanding, 0) << "every event is back in the pool once its request is ready";
  EXPECT_EQ(figures.gets, kTotal);
  EXPECT_CUDA(cudaFree(device_words));
  EXPECT_CUDA(cudaFreeHost(host_words));
}

// Each callback enqueues a memset on the stream and asks again, 100 links in all; each memset
// succeeds from the poller thread, and the last one's value is on the device when the chain ends.
TEST_F(CompletionQueueOnGpu, ACallbackMayEnqueueWorkAndAskAgainAHundredTimes) {
  constexpr int kLinks = 100;
  Stream stream;
  std::uint32_t *word = nullptr;
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&word), sizeof(std::uint32_t)));
  std::atomic<int> links{0}, failed{0}, cuda_errors{0};
  std::promise<void> ended;
  std::function<void(cudaError_t)> link;
  CompletionQueue queue{CUDACompletionBackend(*pool_)};
  link = [&](cudaError_t status) {
    if (status != cudaSuccess) ++failed;
    const int done = ++links;
    if (done == kLinks) {
      ended.set_value();
      return;
    }
    if (cudaMemsetAsync(word, done, sizeof(std::uint32_t), stream) != cudaSuccess) ++cuda_errors;
    try {
      queue.notify(stream, link);
    } catch (...) {
      ++cuda_errors;
      ended.set_value();
    }
  };
  ASSERT_CUDA(cudaMemsetAsync(word, 0, sizeof(std::uint32_t), stream));
  queue.notify(stream, link);
  ASSERT_EQ(ended.get_future().wait_for(30s), std::future_status::ready) << "after " << links.load() << " links";
  EXPECT_EQ(links.load(), kLinks);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(cuda_errors.load(), 0) << "a CUDA call or a request from a callback failed";
  std::uint32_t value = 0;
  ASSERT_CUDA(cudaMemcpy(&value, word, sizeof value, cudaMemcpyDeviceToHost));
  EXPECT_EQ(value, 0x01010101u * (kLinks - 1)) << "the last link's memset was done before its callback";
  ASSERT_CUDA(cudaFree(word));
  const auto deadline = std::chrono::steady_clock::now() + 5s;  // the last link's event goes back after it
  while (queue.stats().completions < static_cast<std::uint64_t>(kLinks) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100us);
  EXPECT_EQ(queue.stats().completions, static_cast<std::uint64_t>(kLinks));
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// A thread waits on the handle of a 20 ms spin: wait() returns cudaSuccess no sooner than the
// spin took, after the callback; the handle was not ready while the stream was busy.
TEST_F(CompletionQueueOnGpu, WaitReturnsAfterTheWorkAndTheCallbackAndReadyOnlyThen) {
  Stream stream;
  std::atomic<bool> called{false};
  CompletionQueue queue{CUDACompletionBackend(*pool_)};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_CUDA(kernels_->spin(stream, 20ms));
  Completion completion = queue.notify(stream, [&](cudaError_t) { called = true; });
  const bool ready_early = completion.ready();
  const cudaError_t busy = cudaStreamQuery(stream);
  EXPECT_EQ(busy, cudaErrorNotReady) << "the 20 ms spin had ended already";
  if (busy == cudaErrorNotReady) {
    EXPECT_FALSE(ready_early) << "ready while the stream was still busy";
  }

  cudaError_t status = cudaErrorUnknown;
  bool ready_after = false, called_before_return = false;
  std::chrono::steady_clock::duration took{};
  std::thread waiter([&] {
    status = completion.wait();
    took = std::chrono::steady_clock::now() - start;
    ready_after = completion.ready();
    called_before_return = called.load();
  });
  waiter.join();
  EXPECT_EQ(status, cudaSuccess);
  EXPECT_TRUE(ready_after);
  EXPECT_TRUE(called_before_return) << "wait() returned before the callback ran";
  EXPECT_GE(took, 19ms) << "wait() returned before the spin could have ended";
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  EXPECT_EQ(completion.status(), cudaSuccess);
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// notify() on a stream that is capturing (global mode, the strictest) throws
// std::invalid_argument before taking an event, leaves the callback with the caller, and does
// nothing that invalidates the capture: it ends, its graph runs, and the same callback then
// works on the stream the graph is launched on.
TEST_F(CompletionQueueOnGpu, ACapturingStreamIsRefusedAndItsCaptureGoesOn) {
  struct Callback {
    std::unique_ptr<int> owned;
    std::atomic<int> *calls;
    void operator()(cudaError_t status) const {
      if (status == cudaSuccess && owned != nullptr) ++*calls;
    }
  };
  Stream capturing, launching;
  std::uint32_t *word = nullptr;
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&word), sizeof(std::uint32_t)));
  std::atomic<int> calls{0};
  Callback callback{std::make_unique<int>(7), &calls};
  CompletionQueue queue{CUDACompletionBackend(*pool_)};

  ASSERT_CUDA(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeGlobal));
  EXPECT_CUDA(cudaMemsetAsync(word, 0x11, sizeof(std::uint32_t), capturing));
  try {
    queue.notify(capturing, std::move(callback));
    ADD_FAILURE() << "notify() accepted a capturing stream";
  } catch (const std::invalid_argument &error) {
    EXPECT_NE(std::string(error.what()).find("is capturing"), std::string::npos) << error.what();
  }
  EXPECT_NE(callback.owned, nullptr) << "the refused callback was moved from";
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EXPECT_CUDA(cudaStreamIsCapturing(capturing, &capture));
  EXPECT_EQ(capture, cudaStreamCaptureStatusActive) << "the refusal invalidated the capture";
  EXPECT_CUDA(cudaMemsetAsync(word, 0x22, sizeof(std::uint32_t), capturing));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(capturing, &graph));
  ASSERT_NE(graph, nullptr);
  std::size_t nodes = 0;
  EXPECT_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 2u) << "both memsets were captured, and nothing else";
  EXPECT_EQ(pool_->stats().total().gets, 0u) << "refused before any event was taken";

  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  ASSERT_CUDA(cudaMemsetAsync(word, 0, sizeof(std::uint32_t), launching));
  ASSERT_CUDA(cudaGraphLaunch(exec, launching));
  Completion completion = queue.notify(launching, std::move(callback));
  ASSERT_TRUE(ready_within(completion, 10s));
  EXPECT_EQ(completion.status(), cudaSuccess);
  EXPECT_EQ(calls.load(), 1);
  std::uint32_t value = 0;
  EXPECT_CUDA(cudaMemcpy(&value, word, sizeof value, cudaMemcpyDeviceToHost));
  EXPECT_EQ(value, 0x22222222u);
  EXPECT_CUDA(cudaGraphExecDestroy(exec));
  EXPECT_CUDA(cudaGraphDestroy(graph));
  EXPECT_CUDA(cudaFree(word));
}

// The queue goes out of scope while a 50 ms spin is in progress: its destructor returns only
// after the callback ran (with cudaSuccess), and the handle outlives the queue.
TEST_F(CompletionQueueOnGpu, TheDestructorReturnsOnlyAfterTheCallbackOfPendingWorkRan) {
  Stream stream;
  std::atomic<int> calls{0};
  std::atomic<cudaError_t> seen{cudaErrorUnknown};
  Completion completion;
  const auto start = std::chrono::steady_clock::now();
  {
    CompletionQueue queue{CUDACompletionBackend(*pool_)};
    ASSERT_CUDA(kernels_->spin(stream, 50ms));
    completion = queue.notify(stream, [&](cudaError_t status) {
      seen = status;
      ++calls;
    });
    EXPECT_EQ(calls.load(), 0) << "the callback ran while the spin was in progress";
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(calls.load(), 1) << "the destructor returned before the callback ran";
  EXPECT_EQ(seen.load(), cudaSuccess);
  EXPECT_GE(took, 49ms);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  ASSERT_TRUE(completion.ready()) << "a handle outlives its queue";
  EXPECT_EQ(completion.status(), cudaSuccess);
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// CompletionPolling::kCaller: no thread but the test's polls. Ten requests on two streams behind
// 5 ms spins stay pending however long they wait, then poll() in a loop finishes them all, each
// callback on the test's thread.
TEST_F(CompletionQueueOnGpu, ACallerPolledQueueRunsCallbacksOnlyInsidePoll) {
  Stream streams[2];
  constexpr int kRequests = 10;
  std::atomic<int> calls{0}, failed{0}, elsewhere{0};
  const std::thread::id test_thread = std::this_thread::get_id();
  std::vector<Completion> handles;
  CompletionQueue queue{CUDACompletionBackend(*pool_), CompletionQueueOptions{CompletionPolling::kCaller}};
  for (int i = 0; i < kRequests; ++i) {
    Stream &stream = streams[i % 2];
    ASSERT_CUDA(kernels_->spin(stream, 5ms));
    handles.push_back(queue.notify(stream, [&](cudaError_t status) {
      ++calls;
      if (status != cudaSuccess) ++failed;
      if (std::this_thread::get_id() != test_thread) ++elsewhere;
    }));
  }
  ASSERT_CUDA(cudaStreamSynchronize(streams[0]));
  ASSERT_CUDA(cudaStreamSynchronize(streams[1]));
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(calls.load(), 0) << "a callback ran without a poll()";
  for (const Completion &handle : handles) EXPECT_FALSE(handle.ready());

  std::size_t finished = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (finished < kRequests && std::chrono::steady_clock::now() < deadline) finished += queue.poll();
  EXPECT_EQ(finished, static_cast<std::size_t>(kRequests));
  EXPECT_EQ(calls.load(), kRequests);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(elsewhere.load(), 0) << "a callback ran on a thread other than the polling one";
  for (const Completion &handle : handles) {
    ASSERT_TRUE(handle.ready());
    EXPECT_EQ(handle.status(), cudaSuccess);
  }
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.poller_cpu_time().count(), 0) << "a kCaller queue has no thread of its own";
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// cudaStreamDestroy returns at once while the stream's work runs, and the next cudaStreamCreate
// may get the same handle (49 rounds of 50 on the H200 host). Each round asks for A on a stream,
// enqueues a 20 ms spin and a plain event after it, asks for B, destroys the stream, creates
// streams until one has the same handle (16 tries at most), and asks for C on it. A is done at
// once, and so is C, on its idle stream; B's callback must find the plain event complete: B's own
// work done. Keyed by handle alone, the poller took C's completion for B's (the first poll finished
// B with the spin running). Polled by the test, so that A, B and C are all filed before a query.
// Once with event queries, once with signals (C's signal lands at once, and must finish only C).
TEST_F(CompletionQueueOnGpu, AStreamDestroyedWithWorkRunningIsNotFinishedByTheNextStreamToGetItsHandle) {
  for (const CompletionSignal signal : {CompletionSignal::kEventQuery, CompletionSignal::kAuto}) {
    SCOPED_TRACE(signal == CompletionSignal::kAuto ? "signals" : "event queries");
    expect_the_old_stream_not_finished_by_the_new(signal);
  }
}

void CompletionQueueOnGpu::expect_the_old_stream_not_finished_by_the_new(CompletionSignal signal) {
  constexpr int kRounds = 20, kTries = 16;
  CompletionQueue queue{CUDACompletionBackend(*pool_),
                        CompletionQueueOptions{.polling = CompletionPolling::kCaller, .signal = signal}};
  int reused = 0, early = 0, failed = 0;
  for (int round = 0; round < kRounds; ++round) {
    cudaStream_t first = nullptr;
    ASSERT_CUDA(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking));
    cudaEvent_t after_spin = nullptr;
    ASSERT_CUDA(cudaEventCreateWithFlags(&after_spin, cudaEventDisableTiming));
    Completion a = queue.notify(first);
    ASSERT_CUDA(kernels_->spin(first, 20ms));
    ASSERT_CUDA(cudaEventRecord(after_spin, first));
    bool b_early = false;
    Completion b = queue.notify(first, [&](cudaError_t status) {
      if (status != cudaSuccess) ++failed;
      b_early = cudaEventQuery(after_spin) != cudaSuccess;
    });
    ASSERT_CUDA(cudaStreamDestroy(first));
    std::vector<cudaStream_t> created;
    bool same_handle = false;
    for (int i = 0; i < kTries && !same_handle; ++i) {
      cudaStream_t stream = nullptr;
      ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      created.push_back(stream);
      same_handle = stream == first;
    }
    Completion c;
    if (same_handle) {
      ++reused;
      c = queue.notify(created.back());
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!(a.ready() && b.ready() && (!c.valid() || c.ready())) && std::chrono::steady_clock::now() < deadline)
      queue.poll();
    ASSERT_TRUE(b.ready()) << "round " << round << ": B is not done after 10 s";
    if (b_early) ++early;
    EXPECT_EQ(a.status(), cudaSuccess);
    if (c.valid()) {
      EXPECT_EQ(c.status(), cudaSuccess);
    }
    for (cudaStream_t stream : created) EXPECT_CUDA(cudaStreamDestroy(stream));
    EXPECT_CUDA(cudaEventDestroy(after_spin));
  }
  RecordProperty("rounds", kRounds);
  RecordProperty("rounds_with_the_handle_reused", reused);
  std::printf("the new stream got the destroyed one's handle in %d of %d rounds\n", reused, kRounds);
  EXPECT_EQ(early, 0) << "B's callback ran before its spin ended, in " << early << " of the " << reused
                      << " rounds that reused the handle";
  std::printf("%llu of %llu requests signalled\n", static_cast<unsigned long long>(queue.stats().signalled),
              static_cast<unsigned long long>(queue.stats().requests));
  if (signal == CompletionSignal::kAuto)
    EXPECT_GT(queue.stats().signalled, 0u) << "the test ran on event queries only: the device takes no signal";
  else
    EXPECT_EQ(queue.stats().signalled, 0u);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// Completion signals on a created stream: 16 requests behind a 2 ms spin, each after a 4-byte
// memset of its own word copied back to pinned host memory; once the stream is done, one pass
// finishes all 16 in order through the signals, without an event query (the oldest's word, then
// the newest's), and each callback sees its word's copy landed (the write's fence). The same with
// kEventQuery takes queries and no signal.
TEST_F(CompletionQueueOnGpu, SignalsFinishAStreamsRequestsWithoutQueriesAndTheCallbacksSeeTheWorksWrites) {
  constexpr int kRequests = 16;
  Stream stream;
  std::uint32_t *device_words = nullptr, *host_words = nullptr;
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&device_words), kRequests * sizeof(std::uint32_t)));
  ASSERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&host_words), kRequests * sizeof(std::uint32_t)));
  for (CompletionSignal signal : {CompletionSignal::kAuto, CompletionSignal::kEventQuery}) {
    const char *name = signal == CompletionSignal::kAuto ? "kAuto" : "kEventQuery";
    for (int i = 0; i < kRequests; ++i) host_words[i] = 0;
    std::vector<int> order;
    int unseen = 0;
    {
      CompletionQueue queue{CUDACompletionBackend(*pool_),
                            CompletionQueueOptions{.polling = CompletionPolling::kCaller, .signal = signal}};
      ASSERT_CUDA(kernels_->spin(stream, 2ms));
      for (int i = 0; i < kRequests; ++i) {
        ASSERT_CUDA(cudaMemsetAsync(device_words + i, 0x11 + i, sizeof(std::uint32_t), stream));
        ASSERT_CUDA(cudaMemcpyAsync(host_words + i, device_words + i, sizeof(std::uint32_t),
                                    cudaMemcpyDeviceToHost, stream));
        queue.notify(stream, [&, i](cudaError_t status) {
          order.push_back(status == cudaSuccess ? i : -1);
          const std::uint32_t byte = 0x11u + static_cast<std::uint32_t>(i);
          unseen += host_words[i] != (byte | byte << 8 | byte << 16 | byte << 24);
        });
      }
      ASSERT_CUDA(cudaStreamSynchronize(stream));
      const CompletionQueueStats before = queue.stats();
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      std::size_t finished = 0;
      while (finished < kRequests && std::chrono::steady_clock::now() < deadline) finished += queue.poll();
      const CompletionQueueStats after = queue.stats();
      EXPECT_EQ(finished, static_cast<std::size_t>(kRequests)) << name;
      if (signal == CompletionSignal::kAuto) {
        EXPECT_EQ(after.signalled, static_cast<std::uint64_t>(kRequests)) << "the device takes no signal";
        EXPECT_EQ(after.queries - before.queries, 0u) << name;
        EXPECT_GE(after.signal_reads - before.signal_reads, 2u) << name;
      } else {
        EXPECT_EQ(after.signalled, 0u);
        EXPECT_EQ(after.signal_reads, 0u);
        EXPECT_EQ(after.queries - before.queries, 2u) << name << ": caught up";
      }
      std::printf("%s: signalled %llu, signal reads %llu, queries %llu\n", name,
                  static_cast<unsigned long long>(after.signalled),
                  static_cast<unsigned long long>(after.signal_reads),
                  static_cast<unsigned long long>(after.queries));
    }
    std::vector<int> expected(kRequests);
    for (int i = 0; i < kRequests; ++i) expected[i] = i;
    EXPECT_EQ(order, expected) << name;
    EXPECT_EQ(unseen, 0) << name << ": a callback did not see its word's copy";
  }
  EXPECT_CUDA(cudaFreeHost(host_words));
  EXPECT_CUDA(cudaFree(device_words));
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// A thread that captures a stream in global mode (the strictest) makes its first request to a
// queue with signals, on another stream: the pinned memory of its slots is allocated then, and
// freed when the queue is destroyed, both inside the capture. Neither may invalidate the capture,
// and the allocation must succeed (a refusal turns the queue's signals off for good).
TEST_F(CompletionQueueOnGpu, SignalMemoryMadeAndFreedInsideAThreadsCaptureLeavesTheCaptureValid) {
  Stream capturing, other;
  std::uint32_t *word = nullptr;
  ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&word), sizeof(std::uint32_t)));
  std::optional<CompletionQueue> queue;
  queue.emplace(CUDACompletionBackend(*pool_), CompletionQueueOptions{.polling = CompletionPolling::kCaller,
                                                                      .signal = CompletionSignal::kAuto});
  ASSERT_CUDA(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeGlobal));
  EXPECT_CUDA(cudaMemsetAsync(word, 0x11, sizeof(std::uint32_t), capturing));
  Completion completion = queue->notify(other);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!completion.ready() && std::chrono::steady_clock::now() < deadline) queue->poll();
  EXPECT_TRUE(completion.ready());
  EXPECT_EQ(completion.status(), cudaSuccess);
  EXPECT_EQ(queue->stats().signalled, 1u) << "the slots' memory could not be allocated inside the capture";
  queue.reset();  // frees the slots' memory, inside the capture
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EXPECT_CUDA(cudaStreamIsCapturing(capturing, &capture));
  EXPECT_EQ(capture, cudaStreamCaptureStatusActive) << "the allocation or the free invalidated the capture";
  cudaGraph_t graph = nullptr;
  EXPECT_CUDA(cudaStreamEndCapture(capturing, &graph));
  if (graph != nullptr) {
    EXPECT_CUDA(cudaGraphDestroy(graph));
  }
  EXPECT_CUDA(cudaFree(word));
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// The special handles name one stream per device (the legacy stream) or per thread and device
// (the per-thread stream): the queue reads their ids too, so a thread's requests on each keep
// their order and are caught up: with the work done, one pass finishes eight requests with two
// queries, the oldest and the newest. (Eight queries would mean the id was not read.)
TEST_F(CompletionQueueOnGpu, RequestsOnTheSpecialHandlesKeepTheirOrderAndAreCaughtUp) {
  constexpr int kRequests = 8;
  CompletionQueue queue{CUDACompletionBackend(*pool_), CompletionQueueOptions{CompletionPolling::kCaller}};
  for (cudaStream_t stream : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    const std::string name = stream == nullptr            ? "0"
                             : stream == cudaStreamLegacy ? "cudaStreamLegacy"
                                                          : "cudaStreamPerThread";
    std::vector<int> order;
    ASSERT_CUDA(kernels_->spin(stream, 2ms));
    for (int i = 0; i < kRequests; ++i)
      queue.notify(stream, [&order, i](cudaError_t status) { order.push_back(status == cudaSuccess ? i : -1); });
    ASSERT_CUDA(cudaDeviceSynchronize());
    const std::uint64_t queries = queue.stats().queries;
    EXPECT_EQ(queue.poll(), static_cast<std::size_t>(kRequests)) << name;
    EXPECT_EQ(queue.stats().queries - queries, 2u) << name << ": not caught up";
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << name;
  }
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// 0 and cudaStreamLegacy are two handles of one stream, the legacy stream (the library is built
// without per-thread default streams): a thread's request on 0, then one on cudaStreamLegacy, are
// one stream's, so the first must complete first. Each round puts both behind a 2 ms spin and
// polls until both are done; when the spin ends between the pass's queries of the two, a queue
// that files them apart (keyed by handle, not by the stream's id alone) finishes the second first.
TEST_F(CompletionQueueOnGpu, RequestsOnZeroThenOnCudaStreamLegacyCompleteInTheirOrder) {
  constexpr int kRounds = 50;
  CompletionQueue queue{CUDACompletionBackend(*pool_), CompletionQueueOptions{CompletionPolling::kCaller}};
  int out_of_order = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<int> order;
    ASSERT_CUDA(kernels_->spin(cudaStream_t{nullptr}, 2ms));
    queue.notify(cudaStream_t{nullptr}, [&order](cudaError_t) { order.push_back(0); });
    queue.notify(cudaStreamLegacy, [&order](cudaError_t) { order.push_back(1); });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (order.size() < 2 && std::chrono::steady_clock::now() < deadline) queue.poll();
    ASSERT_EQ(order.size(), 2u) << "round " << round << ": not done after 10 s";
    out_of_order += order[0] != 0;
  }
  EXPECT_EQ(out_of_order, 0) << "the request on cudaStreamLegacy completed before the earlier one on 0 in "
                             << out_of_order << " of " << kRounds << " rounds";
  EXPECT_EQ(pool_->stats().total().outstanding, 0);
}

// The sticky error, in a process of its own (the error ends every CUDA call in the process):
// evpool_completion_error_scenario runs the fault kernel, asks on its stream, on one whose long
// kernel runs when the fault happens and, later, on another; each callback runs once with what its
// handle reports, an error for the faulting and the later stream (the scenario exits 0 if so, 77
// without a GPU). The spinning stream's kernel may end with the context or run to its end: the
// queue hearing completions through signals, with one query per device per interval for the
// errors, must tell its callback what the queue asking every stream's event tells it.
struct ChildOutcome {
  bool hung = false;
  int status = 0;
  std::string output;  // stdout and stderr
};

ChildOutcome run_child(const std::filesystem::path &program, const char *mode) {
  const std::string log =
      std::filesystem::temp_directory_path() / ("evpool-completion-error-" + std::to_string(getpid()) + ".log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const std::string path = program.string();
  char *argv[] = {const_cast<char *>(path.c_str()), const_cast<char *>(mode), nullptr};
  pid_t pid = 0;
  ChildOutcome outcome;
  const int spawned = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    outcome.status = -1;
    outcome.output = "could not start " + path;
    return outcome;
  }
  int wait_status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (waitpid(pid, &wait_status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wait_status, 0);
      outcome.hung = true;
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  outcome.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  outcome.output = text.str();
  std::filesystem::remove(log);
  return outcome;
}

TEST(CompletionQueueStickyError, ReachesTheCallbackOfItsStreamAndOfALaterRequestOnAnotherOnceEach) {
  // The line that begins with `prefix`, up to its ", heard after N ms", which varies from run to run.
  const auto line_of = [](const std::string &output, const std::string &prefix) {
    const std::size_t at = output.find(prefix);
    if (at == std::string::npos) return std::string();
    const std::string line = output.substr(at, output.find('\n', at) - at);
    return line.substr(0, line.find(", heard after "));
  };
  std::string spinning_by_query;
  for (const char *mode : {"query", "signal"}) {
    SCOPED_TRACE(mode);
    const ChildOutcome outcome = run_child(
        std::filesystem::read_symlink("/proc/self/exe").parent_path() / "evpool_completion_error_scenario", mode);
    if (outcome.status == 77) GTEST_SKIP() << outcome.output;
    EXPECT_FALSE(outcome.hung) << "the scenario did not exit within 60 s:\n" << outcome.output;
    EXPECT_EQ(outcome.status, 0) << outcome.output;
    for (const char *prefix :
         {"faulting stream: callbacks 1, status ", "other stream, later: callbacks 1, status "}) {
      const std::string line = line_of(outcome.output, prefix);
      EXPECT_FALSE(line.empty()) << "no line \"" << prefix << "\":\n" << outcome.output;
      EXPECT_EQ(line.find("cudaSuccess"), std::string::npos) << outcome.output;
    }
    const std::string spinning = line_of(outcome.output, "spinning stream, at the fault: callbacks 1, status ");
    EXPECT_FALSE(spinning.empty()) << outcome.output;
    if (spinning_by_query.empty())
      spinning_by_query = spinning;
    else
      EXPECT_EQ(spinning, spinning_by_query) << "signals and queries told the spinning stream's callback apart";
  }
}

}  // namespace
}  // namespace evpool
