// CUDAEvent and CUDAEventPool on real GPUs. Each test skips, saying why, where no GPU exists.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_availability.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/stream_wait.h"

namespace evpool {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
#define EXPECT_CUDA(call) EXPECT_EQ((call), cudaSuccess) << #call

int device_count() { return testing_support::cuda_availability().devices; }

// Times an empty interval on device 0's legacy stream with two timing events.
void expect_interval_measured(cudaEvent_t start, cudaEvent_t stop) {
  ASSERT_CUDA(cudaEventRecord(start, 0));
  ASSERT_CUDA(cudaEventRecord(stop, 0));
  ASSERT_CUDA(cudaEventSynchronize(stop));
  float ms = -1;
  EXPECT_CUDA(cudaEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 0.0f);
}

// Gets two events from `pool`, times an empty interval with them and puts them back.
void expect_events_measure_time(CUDAEventPool &pool) {
  CUDAEvent start = pool.Get(0), stop = pool.Get(0);
  expect_interval_measured(start, stop);
  pool.Put(std::move(start));
  pool.Put(std::move(stop));
}

int current_device() {
  int device = -1;
  EXPECT_CUDA(cudaGetDevice(&device));
  return device;
}

TEST(CUDAEventOnGpu, CreateOnEachDeviceRecordsItAndRestoresTheCurrentDevice) {
  EVPOOL_REQUIRE_GPU();
  const int devices = device_count();
  ASSERT_CUDA(cudaSetDevice(devices - 1));
  for (int device = 0; device < devices; ++device) {
    CUDAEvent event = CUDAEvent::Create(device);
    ASSERT_TRUE(event);
    EXPECT_EQ(event.device_id(), device);
    EXPECT_EQ(current_device(), devices - 1);
  }
  CUDAEvent on_current = CUDAEvent::Create();
  EXPECT_EQ(on_current.device_id(), devices - 1);
  ASSERT_CUDA(cudaSetDevice(0));
}

TEST(CUDAEventOnGpu, CreateOnAMissingDeviceThrowsCudaError) {
  EVPOOL_REQUIRE_GPU();
  EXPECT_THROW(CUDAEvent::Create(device_count()), CUDAError);
  EXPECT_EQ(current_device(), 0);
}

TEST(CUDAEventOnGpu, TimingEventsMeasureElapsedTime) {
  EVPOOL_REQUIRE_GPU();
  CUDAEvent start = CUDAEvent::CreateWithFlags(cudaEventDefault);
  CUDAEvent stop = CUDAEvent::CreateWithFlags(cudaEventDefault);
  expect_interval_measured(start, stop);
}

TEST(CUDAEventOnGpu, ResetDestroysTheOldHandle) {
  EVPOOL_REQUIRE_GPU();
  CUDAEvent event = CUDAEvent::Create(0);
  cudaEvent_t replacement = CUDAEvent::Create(0).release();
  event.reset(replacement, 0);
  EXPECT_EQ(event.get(), replacement);
  EXPECT_CUDA(cudaEventRecord(event, 0));
  EXPECT_CUDA(cudaEventSynchronize(event));
  event.reset();
  EXPECT_FALSE(event);
}

// The snippet from DALI's documentation, with only the namespace changed.
TEST(CUDAEventPoolOnGpu, DaliStyleCodeWorksUnchanged) {
  EVPOOL_REQUIRE_GPU();
  using evpool::CUDAEvent;
  using evpool::CUDAEventPool;
  int device_id = 0;
  cudaStream_t stream, other_stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&other_stream, cudaStreamNonBlocking));

  auto &pool = CUDAEventPool::instance();
  CUDAEvent event = pool.Get(device_id);
  const cudaEvent_t handle = event;
  ASSERT_CUDA(cudaEventRecord(event, stream));
  ASSERT_CUDA(cudaStreamWaitEvent(other_stream, event, 0));
  pool.Put(std::move(event), device_id);

  CUDAEvent reused = pool.Get(device_id);
  EXPECT_EQ(reused.get(), handle);
  pool.Put(std::move(reused));
  EXPECT_CUDA(cudaStreamSynchronize(other_stream));
  EXPECT_CUDA(cudaStreamDestroy(stream));
  EXPECT_CUDA(cudaStreamDestroy(other_stream));
  EXPECT_EQ(&CUDAEventPool::instance(), &pool);
}

TEST(CUDAEventPoolOnGpu, GetFromAThreadWhoseCurrentDeviceIsAnotherOne) {
  EVPOOL_REQUIRE_GPU();
  const int devices = device_count();
  CUDAEventPool pool;
  for (int device = 0; device < devices; ++device) {
    const int other = (device + 1) % devices;
    std::thread([&] {
      ASSERT_CUDA(cudaSetDevice(other));
      CUDAEvent event = pool.Get(device);
      EXPECT_EQ(event.device_id(), device);
      EXPECT_EQ(current_device(), other);
      // Recording on a stream of `device` succeeds only for an event of `device`.
      ASSERT_CUDA(cudaSetDevice(device));
      cudaStream_t stream;
      ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      EXPECT_CUDA(cudaEventRecord(event, stream));
      EXPECT_CUDA(cudaStreamSynchronize(stream));
      EXPECT_CUDA(cudaStreamDestroy(stream));
      // Put with -1 from yet another current device files it under its own device.
      ASSERT_CUDA(cudaSetDevice(other));
      pool.Put(std::move(event));
    }).join();
  }
}

TEST(CUDAEventPoolOnGpu, BadDeviceOrdinalsAreRejectedAndTheCallerKeepsItsEvent) {
  EVPOOL_REQUIRE_GPU();
  const int devices = device_count();
  CUDAEventPool pool;
  EXPECT_THROW(pool.Get(devices), std::out_of_range);
  EXPECT_THROW(pool.Get(-2), std::out_of_range);
  CUDAEvent event = pool.Get(0);
  EXPECT_THROW(pool.Put(std::move(event), devices), std::out_of_range);
  EXPECT_TRUE(event);
  if (devices > 1) {
    EXPECT_THROW(pool.Put(std::move(event), 1), std::invalid_argument);
    EXPECT_TRUE(event);
  }
  EXPECT_THROW(pool.Put(CUDAEvent()), std::invalid_argument);
  pool.Put(std::move(event));
}

TEST(CUDAEventPoolOnGpu, TimingPoolHandsOutEventsThatMeasureTime) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool timing(cudaEventDefault);
  expect_events_measure_time(timing);
  timing.Purge();
}

// Many threads on every device: each gets an event of its device, records it after writing a
// value on stream A, makes stream B wait on it and copy the value back, and returns the event.
// Checks: every CUDA call succeeds (an event of the wrong device fails to record), no handle is
// held by two threads at once, and every copy on B sees the value A wrote before the record.
TEST(CUDAEventPoolOnGpu, ManyThreadsOnEveryDeviceOrderStreamsThroughPooledEvents) {
  EVPOOL_REQUIRE_GPU();
  const int devices = device_count();
  constexpr int kThreadsPerDevice = 8;
  constexpr int kRounds = 300;
  CUDAEventPool pool;

  std::mutex holders_mutex;
  std::set<cudaEvent_t> holders;
  std::atomic<int> held_twice{0}, wrong_values{0}, cuda_failures{0};

  auto worker = [&](int device, int seed) {
    if (cudaSetDevice((device + 1) % devices) != cudaSuccess) ++cuda_failures;  // another current
    cudaStream_t a = nullptr, b = nullptr;
    std::uint32_t *buffer = nullptr;
    std::uint32_t *host = nullptr;
    auto ok = [&](cudaError_t error) {
      if (error != cudaSuccess) ++cuda_failures;
      return error == cudaSuccess;
    };
    {
      cudaSetDevice(device);
      ok(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
      ok(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
      ok(cudaMalloc(reinterpret_cast<void **>(&buffer), 1 << 20));
      ok(cudaMallocHost(reinterpret_cast<void **>(&host), sizeof(std::uint32_t)));
      cudaSetDevice((device + 1) % devices);
    }
    for (int round = 0; round < kRounds; ++round) {
      CUDAEvent event = pool.Get(device);
      {
        std::lock_guard<std::mutex> lock(holders_mutex);
        if (!holders.insert(event.get()).second) ++held_twice;
      }
      const int byte = (seed + round) & 0x7F;
      ok(cudaMemsetAsync(buffer, byte, 1 << 20, a));
      ok(cudaEventRecord(event, a));
      ok(cudaStreamWaitEvent(b, event, 0));
      ok(cudaMemcpyAsync(host, buffer + (1 << 18) - 1, sizeof(std::uint32_t), cudaMemcpyDeviceToHost, b));
      {
        std::lock_guard<std::mutex> lock(holders_mutex);
        holders.erase(event.get());
      }
      pool.Put(std::move(event), round % 2 == 0 ? device : -1);
      ok(cudaStreamSynchronize(b));
      const std::uint32_t expected = 0x01010101u * static_cast<std::uint32_t>(byte);
      if (*host != expected) ++wrong_values;
      ok(cudaStreamSynchronize(a));
    }
    ok(cudaStreamDestroy(a));
    ok(cudaStreamDestroy(b));
    ok(cudaFree(buffer));
    ok(cudaFreeHost(host));
  };

  std::vector<std::thread> threads;
  for (int device = 0; device < devices; ++device)
    for (int t = 0; t < kThreadsPerDevice; ++t) threads.emplace_back(worker, device, t * 17);
  for (std::thread &thread : threads) thread.join();

  EXPECT_EQ(cuda_failures.load(), 0);
  EXPECT_EQ(held_twice.load(), 0);
  EXPECT_EQ(wrong_values.load(), 0);
  pool.Purge();
}

TEST(CUDAEventPoolOnGpu, InstanceForOtherFlagsGivesProcessWidePoolsOfThoseFlags) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool &timing = CUDAEventPool::instance_for(cudaEventDefault);
  EXPECT_EQ(&timing, &CUDAEventPool::instance_for(cudaEventDefault));
  EXPECT_NE(&timing, &CUDAEventPool::instance());
  EXPECT_EQ(&CUDAEventPool::instance(), &CUDAEventPool::instance_for(cudaEventDisableTiming));
  EXPECT_EQ(timing.event_flags(), static_cast<unsigned>(cudaEventDefault));
  expect_events_measure_time(timing);
  EXPECT_THROW(CUDAEventPool::instance_for(cudaEventInterprocess), std::invalid_argument);
}

TEST(CUDAEventPoolOnGpu, LeasesRecordAndReturnRealEvents) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool pool;
  cudaEvent_t handle = nullptr;
  {
    auto lease = pool.Lease(0);
    handle = lease.get();
    ASSERT_CUDA(cudaEventRecord(lease, 0));
    auto shared = pool.LeaseShared(0);
    auto copy = shared;
    ASSERT_CUDA(cudaEventRecord(copy, 0));
    ASSERT_CUDA(cudaEventSynchronize(shared));
  }
  EXPECT_EQ(pool.Get(0).get(), handle) << "the unique lease, destroyed last, put its event on top";
  pool.Reserve(0, 4);
  pool.Trim(1);
}

// wait(): the consumer sees what the producer wrote before the call, whatever the stream handles.
class StreamWaitOnGpu : public testing::Test {
 protected:
  void SetUp() override {
    EVPOOL_REQUIRE_GPU();
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaMalloc(reinterpret_cast<void **>(&buffer_), kBytes));
    ASSERT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&host_), sizeof(std::uint32_t)));
  }
  void TearDown() override {
    if (buffer_) cudaFree(buffer_);
    if (host_) cudaFreeHost(host_);
  }

  // Writes `byte` on producer, waits through evpool::wait, copies back on consumer.
  bool ordered(cudaStream_t consumer, cudaStream_t producer, int byte) {
    EXPECT_CUDA(cudaMemsetAsync(buffer_, byte, kBytes, producer));
    evpool::wait(consumer, producer);
    EXPECT_CUDA(cudaMemcpyAsync(host_, buffer_ + kBytes / 4 - 1, sizeof(std::uint32_t),
                                cudaMemcpyDeviceToHost, consumer));
    EXPECT_CUDA(cudaStreamSynchronize(consumer));
    return *host_ == 0x01010101u * static_cast<std::uint32_t>(byte);
  }

  static constexpr std::size_t kBytes = 64 << 20;
  std::uint32_t *buffer_ = nullptr;
  std::uint32_t *host_ = nullptr;
};

TEST_F(StreamWaitOnGpu, OrdersTwoStreamsAndRestoresTheCurrentDevice) {
  cudaStream_t producer, consumer;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  for (int byte = 1; byte < 40; ++byte) EXPECT_TRUE(ordered(consumer, producer, byte)) << byte;
  EXPECT_EQ(current_device(), 0);
  EXPECT_CUDA(cudaStreamDestroy(producer));
  EXPECT_CUDA(cudaStreamDestroy(consumer));
}

TEST_F(StreamWaitOnGpu, UnderstandsTheSpecialHandles) {
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  EXPECT_TRUE(ordered(stream, cudaStreamPerThread, 3));
  EXPECT_TRUE(ordered(cudaStreamPerThread, stream, 4));
  EXPECT_TRUE(ordered(stream, cudaStreamLegacy, 5));
  EXPECT_TRUE(ordered(cudaStreamLegacy, stream, 6));
  EXPECT_TRUE(ordered(stream, nullptr, 7));
  EXPECT_TRUE(ordered(nullptr, stream, 8));
  EXPECT_EQ(current_device(), 0);
  EXPECT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(StreamWaitOnGpu, CrossesDevicesAndRestoresTheCallersDevice) {
  const int devices = device_count();
  if (devices < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << devices;
  cudaStream_t producer, consumer;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));  // on device 0
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));  // on device 1
  ASSERT_CUDA(cudaMemsetAsync(buffer_, 9, kBytes, producer));
  evpool::wait(consumer, producer);
  EXPECT_EQ(current_device(), 1);
  ASSERT_CUDA(cudaMemcpyAsync(host_, buffer_ + kBytes / 4 - 1, sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                              consumer));
  ASSERT_CUDA(cudaStreamSynchronize(consumer));
  EXPECT_EQ(*host_, 0x09090909u);
  EXPECT_CUDA(cudaStreamDestroy(consumer));
  ASSERT_CUDA(cudaSetDevice(0));
  EXPECT_CUDA(cudaStreamDestroy(producer));
}

}  // namespace
}  // namespace evpool
