// CUDAStreamPool on a real GPU: DALI's own tests of its stream pool (dali/core/
// cuda_stream_pool_test.cc, Apache-2.0) rewritten against evpool, then what evpool adds: no
// stream leased with work pending, under load from many threads; leases that change threads and
// outlive their pool; Purge racing Gets and Puts; pools keyed by flags and priority; bad options
// refused by value. Each skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_availability.h"
#include "evpool/cuda_stream.h"
#include "evpool/cuda_stream_pool.h"
#include "evpool/pool_cap.h"
#include "evpool/deferred_work.h"

namespace evpool {
namespace {

int device_of(cudaStream_t stream) {
  int device = -1;
  EXPECT_EQ(cudaStreamGetDevice(stream, &device), cudaSuccess);
  return device;
}

// Device memory of `bytes`, freed with the object.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t size) : bytes(size) { EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess); }
  ~DeviceBuffer() { EXPECT_EQ(cudaFree(data), cudaSuccess); }
  void *data = nullptr;
  std::size_t bytes;
};

// DALI's CUDAStreamPoolTest.PutGet: ten threads lease streams of random devices, check the
// device, synchronise, and end the lease in one of DALI's five ways.
TEST(DaliStreamPoolTest, PutGet) {
  EVPOOL_REQUIRE_GPU();
  const int devices = testing_support::cuda_availability().devices;
  CUDAStreamPool pool;
  std::atomic<long> destroyed_by_caller{0};  // DALI's fourth way: the stream leaves the pool
  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&] {
      std::mt19937_64 rng;
      std::uniform_int_distribution<int> pick_device(0, devices - 1), release_method(0, 4);
      for (int i = 0; i < 10000; ++i) {
        const int device = pick_device(rng);
        CUDAStreamLease leased = pool.Get(device);  // not the current device, in general
        CUDAStreamLease stream = std::move(leased);
        ASSERT_EQ(device_of(stream), device) << "CUDAStreamPool mixed streams from different devices";
        ASSERT_EQ(stream.device_id(), device);
        ASSERT_EQ(stream.pool(), &pool);
        ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        switch (release_method(rng)) {
          case 1: stream.reset(); break;
          case 2: pool.Put(stream.release()); break;
          case 3: pool.Put(stream.release(), device); break;
          case 4:
            stream.release().reset();
            ++destroyed_by_caller;
            break;
          default: break;  // out of scope
        }
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.outstanding, destroyed_by_caller.load()) << "every other stream came back";
}

// DALI's GetSameNotBusy.
TEST(DaliStreamPoolTest, GetSameNotBusy) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  CUDAStreamLease stream = pool.Get();
  ASSERT_EQ(cudaStreamQuery(stream), cudaSuccess);
  const cudaStream_t first = stream.get();
  stream.reset();
  stream = pool.Get();
  EXPECT_EQ(stream.get(), first);
}

// DALI's GetNotBusy: a stream handed back with 128 memsets of 16 MiB queued is not the next
// Get's, and lives on in the pool.
TEST(DaliStreamPoolTest, GetNotBusy) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  CUDAStreamLease stream = pool.Get();
  const cudaStream_t first = stream.get();
  ASSERT_EQ(cudaStreamQuery(stream), cudaSuccess);
  DeviceBuffer memory(16 << 20);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(cudaMemsetAsync(memory.data, i, memory.bytes, stream), cudaSuccess);
  stream.reset();
  stream = pool.Get();
  EXPECT_NE(stream.get(), first);
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  stream.reset();
  EXPECT_EQ(cudaStreamSynchronize(first), cudaSuccess);  // it still lives in the pool
  pool.Purge();
}

// StreamReuse::kAtOnce asks nothing: the stream just handed back busy is the next Get's.
TEST(StreamPoolOnGpu, AtOnceReuseHandsABusyStreamOutWithoutAsking) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool(cudaStreamNonBlocking, 0, kUnlimitedIdle, Checks::kDefault, StreamReuse::kAtOnce);
  EXPECT_EQ(pool.reuse(), StreamReuse::kAtOnce);
  CUDAStreamLease stream = pool.Get(0);
  const cudaStream_t first = stream.get();
  DeviceBuffer memory(16 << 20);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(cudaMemsetAsync(memory.data, i, memory.bytes, stream), cudaSuccess);
  stream.reset();
  stream = pool.Get(0);
  EXPECT_EQ(stream.get(), first);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

// Many threads hand streams back with work of varied length still queued; every lease must
// begin with no work pending, and the pool must not create a stream per Get.
TEST(StreamPoolOnGpu, NoStreamIsLeasedWithWorkPendingUnderLoad) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  constexpr int kThreads = 16, kUnits = 2000;
  std::atomic<int> busy{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (cudaSetDevice(0) != cudaSuccess) ++errors;
      DeviceBuffer memory(4 << 20);
      std::mt19937 random(static_cast<unsigned>(t));
      for (int unit = 0; unit < kUnits; ++unit) {
        CUDAStreamLease stream = pool.Get(0);
        if (cudaStreamQuery(stream) != cudaSuccess) ++busy;
        const std::size_t bytes = std::size_t{1} << (10 + random() % 13);  // 1 KiB to 4 MiB
        if (cudaMemsetAsync(memory.data, unit & 0xff, bytes, stream) != cudaSuccess) ++errors;
      }  // each lease ends with its memset queued
      if (cudaDeviceSynchronize() != cudaSuccess) ++errors;
    });
  }
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(busy.load(), 0) << "a lease began on a stream with work pending";
  EXPECT_EQ(errors.load(), 0);
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.outstanding, 0);
  // Without caches (checked mode) every Get takes the depot's top, which holds the streams put
  // back last, the busiest: it creates far more (docs/streams.md).
  if (!pool.checked()) {
    EXPECT_LT(figures.created, figures.gets / 4) << "streams are reused once their work is done";
  }
  std::printf("[ streams  ] %llu leases, %llu streams created\n",
              static_cast<unsigned long long>(figures.gets), static_cast<unsigned long long>(figures.created));
}

// The pattern that used to make the pool create without end: lease, enqueue long work, hand
// back busy, again, on 1 and on 16 threads; every 32nd unit waits for its work, as a scheduler
// bounds what it has in flight. The streams created must level off within the first second (the
// count at 2 s within 5% of the count at 1 s), below what the work in flight and the caches hold.
TEST(StreamPoolOnGpu, StreamsHandedBackBusyLevelOffWithinASecond) {
  EVPOOL_REQUIRE_GPU();
  for (const int thread_count : {1, 16}) {
    CUDAStreamPool pool;
    const std::size_t bytes = thread_count == 1 ? std::size_t{256} << 20 : std::size_t{64} << 20;
    std::atomic<bool> stop{false};
    std::atomic<int> busy{0}, errors{0};
    std::atomic<long> units{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < thread_count; ++t) {
      threads.emplace_back([&] {
        if (cudaSetDevice(0) != cudaSuccess) ++errors;
        DeviceBuffer memory(bytes);
        for (long unit = 1; !stop.load(std::memory_order_relaxed); ++unit) {
          CUDAStreamLease stream = pool.Get(0);
          if (cudaStreamQuery(stream) != cudaSuccess) ++busy;
          if (cudaMemsetAsync(memory.data, static_cast<int>(unit & 0xff), bytes, stream) != cudaSuccess)
            ++errors;
          if (unit % 32 == 0 && cudaStreamSynchronize(stream) != cudaSuccess) ++errors;
          units.fetch_add(1, std::memory_order_relaxed);
        }  // each lease ends with its memset queued, but one in 32
        if (cudaDeviceSynchronize() != cudaSuccess) ++errors;
      });
    }
    std::vector<std::uint64_t> created;
    for (int quarter = 1; quarter <= 8; ++quarter) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      created.push_back(pool.stats().total().created);
    }
    stop.store(true);
    for (std::thread &thread : threads) thread.join();
    std::printf("[ streams  ] %d threads, %ld leases of %zu MiB memsets: created at 0.25 s steps:", thread_count,
                units.load(), bytes >> 20);
    for (const std::uint64_t count : created) std::printf(" %llu", static_cast<unsigned long long>(count));
    std::printf("\n");
    EXPECT_EQ(busy.load(), 0) << "a lease began on a stream with work pending";
    EXPECT_EQ(errors.load(), 0);
    // Levelled off: the second second adds at most 5% to what the first created (the pool this
    // replaced kept creating at the same pace: 24,911 streams in 4 s on one thread).
    EXPECT_LE(created[7], created[3] + created[3] / 20 + 1)
        << thread_count << " threads: streams still created after the first second";
    // Work in flight: at most 32 units a thread; each thread's cache holds up to 2 x 32 more.
    EXPECT_LE(created[7], static_cast<std::uint64_t>(thread_count) * (33 + 64) + 16);
  }
}

// CUDA hands a destroyed stream's handle to the next stream at once. A stream the pool destroys
// while its work runs (Trim), or one a caller takes out (release()) and destroys, leaves nothing
// behind that the next stream with its handle inherits: the new one is handed out idle, and once
// handed back busy is not handed out again until its own work is done.
TEST(StreamPoolOnGpu, AStreamDestroyedBusyLeavesNothingToTheNextStreamWithItsHandle) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  DeviceBuffer memory(std::size_t{256} << 20);
  int reused = 0;
  for (int round = 0; round < 50; ++round) {
    cudaStream_t destroyed;
    {
      CUDAStreamLease stream = pool.Get(0);
      destroyed = stream.get();
      for (int i = 0; i < 8; ++i)
        ASSERT_EQ(cudaMemsetAsync(memory.data, i, memory.bytes, stream), cudaSuccess);
      if (round % 2 == 0) {
        stream.reset();  // back busy
        pool.Trim(0);    // destroyed with its memsets running
      } else {
        stream.release().reset();  // the caller destroys it, busy
      }
    }
    CUDAStreamLease next = pool.Get(0);
    if (next.get() == destroyed) ++reused;
    EXPECT_EQ(cudaStreamQuery(next), cudaSuccess) << "round " << round;
    // The new stream handed back busy is not handed out while its work runs.
    for (int i = 0; i < 8; ++i) ASSERT_EQ(cudaMemsetAsync(memory.data, i, memory.bytes, next), cudaSuccess);
    const cudaStream_t busy = next.get();
    next.reset();
    CUDAStreamLease other = pool.Get(0);
    EXPECT_NE(other.get(), busy) << "round " << round << ": a busy stream was handed out";
    EXPECT_EQ(cudaStreamQuery(other), cudaSuccess);
    other.reset();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    pool.Purge();
  }
  std::printf("[ streams  ] %d of 50 rounds gave the destroyed stream's handle to the next stream\n", reused);
}

// A cap: Get at the cap waits for a busy stream of the pool's, or for a hand-back, and the pool
// never keeps more.
TEST(StreamPoolOnGpu, AtTheCapGetWaitsForABusyStream) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool(cudaStreamNonBlocking, 0, kUnlimitedIdle, Checks::kDefault, StreamReuse::kWhenIdle, 4);
  EXPECT_EQ(pool.max_per_device(), 4u);
  DeviceBuffer memory(std::size_t{64} << 20);
  for (int unit = 0; unit < 400; ++unit) {
    CUDAStreamLease stream = pool.Get(0);
    ASSERT_EQ(cudaStreamQuery(stream), cudaSuccess) << "unit " << unit;
    ASSERT_EQ(cudaMemsetAsync(memory.data, unit & 0xff, memory.bytes, stream), cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LE(pool.stats().total().created, 4u);
  std::vector<CUDAStreamLease> all;
  while (all.size() < 4) all.push_back(pool.Get(0));
  const cudaStream_t handed_back = all.back().get();
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    all.back().reset();
  });
  CUDAStreamLease waited = pool.Get(0);  // every stream is out: waits for the hand-back
  holder.join();
  EXPECT_EQ(waited.get(), handed_back);
  EXPECT_LE(pool.stats().total().created, 4u);
}

// The cap is a bound: a stream put in from outside takes a place and is refused at the cap (the
// caller still owns it), and GetWithin ends a wait at the cap with the device, the cap and what
// this process holds.
TEST(StreamPoolOnGpu, AtTheCapAnOutsideStreamIsRefusedAndGetWithinEnds) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool(cudaStreamNonBlocking, 0, kUnlimitedIdle, Checks::kDefault, StreamReuse::kWhenIdle, 2);
  CUDAStreamLease first = pool.Get(0), second = pool.Get(0);
  CUDAStream outside = CUDAStream::Create(true, 0);
  EXPECT_THROW(pool.Put(std::move(outside)), CapReachedError);
  EXPECT_TRUE(static_cast<bool>(outside)) << "the caller still owns the stream";
  try {
    (void)pool.GetWithin(std::chrono::milliseconds(1), 0);
    ADD_FAILURE() << "GetWithin at the cap returned";
  } catch (const CapReachedError &error) {
    EXPECT_EQ(error.device(), 0);
    EXPECT_EQ(error.cap(), 2u);
    EXPECT_EQ(error.held(), 2u) << error.what();
  }
  second.reset();
  pool.Purge();  // destroys the idle one: a place is free
  pool.Put(std::move(outside));
  EXPECT_FALSE(static_cast<bool>(outside));
  EXPECT_EQ(pool.GetWithin(std::chrono::milliseconds(0), 0).get() != nullptr, true);
}

// Leases handed to other threads, which use and end them after the pool is gone.
TEST(StreamPoolOnGpu, LeasesChangeThreadsAndOutliveThePool) {
  EVPOOL_REQUIRE_GPU();
  std::optional<CUDAStreamPool> pool(std::in_place);
  std::vector<CUDAStreamLease> leases;
  for (int i = 0; i < 64; ++i) leases.push_back(pool->Get(0));
  pool.reset();
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      if (cudaSetDevice(0) != cudaSuccess) ++errors;
      DeviceBuffer memory(1 << 20);
      for (std::size_t i = static_cast<std::size_t>(t); i < leases.size(); i += 4) {
        if (cudaMemsetAsync(memory.data, 1, memory.bytes, leases[i]) != cudaSuccess) ++errors;
        if (cudaStreamSynchronize(leases[i]) != cudaSuccess) ++errors;
        leases[i].reset();  // retired: its pool is gone
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  run_deferred_work();  // the last lease deferred the pool's end: its streams are destroyed here
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(StreamPoolOnGpu, PurgeRacingGetsAndPutsLosesNothing) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, busy{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      if (cudaSetDevice(0) != cudaSuccess) ++errors;
      DeviceBuffer memory(64 << 10);
      while (!stop.load(std::memory_order_relaxed)) {
        CUDAStreamLease stream = pool.Get(0);
        if (cudaStreamQuery(stream) != cudaSuccess) ++busy;
        if (cudaMemsetAsync(memory.data, 2, memory.bytes, stream) != cudaSuccess) ++errors;
        pool.Put(stream.release());
      }
      if (cudaDeviceSynchronize() != cudaSuccess) ++errors;
    });
  }
  for (int purge = 0; purge < 200; ++purge) {
    pool.Purge();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop.store(true);
  for (std::thread &thread : threads) thread.join();
  pool.Purge();
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(busy.load(), 0);
  EXPECT_EQ(figures.outstanding, 0);
  EXPECT_EQ(figures.idle + figures.retired, 0u) << "Purge destroyed every idle stream";
  EXPECT_EQ(figures.created, figures.destroyed);
}

// The process-wide pools are keyed by flags and priority, and create what they are keyed by.
TEST(StreamPoolOnGpu, ProcessWidePoolsAreKeyedByFlagsAndPriority) {
  EVPOOL_REQUIRE_GPU();
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  CUDAStreamPool &plain = CUDAStreamPool::instance();
  EXPECT_EQ(&plain, &CUDAStreamPool::instance_for(cudaStreamNonBlocking, 0));
  CUDAStreamPool &urgent = CUDAStreamPool::instance_for(cudaStreamNonBlocking, greatest);
  CUDAStreamPool &blocking = CUDAStreamPool::instance_for(cudaStreamDefault, 0);
  EXPECT_NE(&plain, &urgent);
  EXPECT_NE(&plain, &blocking);
  EXPECT_EQ(&urgent, &CUDAStreamPool::instance_for(cudaStreamNonBlocking, greatest));
  for (CUDAStreamPool *pool : {&plain, &urgent, &blocking}) {
    CUDAStreamLease stream = pool->Get(0);
    unsigned flags = 0;
    int priority = 1;
    ASSERT_EQ(cudaStreamGetFlags(stream, &flags), cudaSuccess);
    ASSERT_EQ(cudaStreamGetPriority(stream, &priority), cudaSuccess);
    EXPECT_EQ(flags, pool->stream_flags());
    EXPECT_EQ(priority, pool->priority());
  }
}

TEST(StreamPoolOnGpu, OptionsCudaWouldClampOrRejectAreRefusedByValue) {
  EVPOOL_REQUIRE_GPU();
  int least = 0, greatest = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  try {
    CUDAStreamPool pool(cudaStreamNonBlocking, greatest - 1);
    ADD_FAILURE() << "a priority outside the range was accepted";
  } catch (const std::invalid_argument &error) {
    EXPECT_NE(std::string(error.what()).find(std::to_string(greatest - 1)), std::string::npos) << error.what();
  }
  EXPECT_THROW(CUDAStreamPool(2u), std::invalid_argument);
  EXPECT_THROW(CUDAStreamPool::instance_for(cudaStreamNonBlocking, least + 1), std::invalid_argument);
  EXPECT_THROW(CUDAStream::CreateWithPriority(true, greatest - 1), std::invalid_argument);
}

// A bare stream (no device recorded) is asked for its device, as DALI's pool asks every stream.
TEST(StreamPoolOnGpu, ABareStreamPutWithoutADeviceIsAskedForIt) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  cudaStream_t raw = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
  pool.Put(CUDAStream(raw));
  CUDAStreamLease stream = pool.Get(0);
  EXPECT_EQ(stream.get(), raw);
  EXPECT_EQ(stream.device_id(), 0);
  const int devices = testing_support::cuda_availability().devices;
  CUDAStream bare(stream.release());
  EXPECT_THROW(pool.Put(std::move(bare), devices), std::out_of_range);
  EXPECT_TRUE(bare) << "a refused stream stays its caller's";
}

// A Get on one thread while another captures in global mode (the strictest): the Get's
// cudaStreamQuery is on a stream outside the capture, and must not invalidate it.
TEST(StreamPoolOnGpu, AGetDuringAnotherThreadsGlobalCaptureLeavesTheCaptureValid) {
  EVPOOL_REQUIRE_GPU();
  CUDAStreamPool pool;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer memory(1 << 20);
  {
    CUDAStreamLease warm = pool.Get(0);  // the pool holds a stream, put back busy
    ASSERT_EQ(cudaMemsetAsync(memory.data, 3, memory.bytes, warm), cudaSuccess);
  }
  cudaStream_t capturing = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(memory.data, 4, memory.bytes, capturing), cudaSuccess);
  std::thread other([&] {
    (void)cudaSetDevice(0);
    CUDAStreamLease stream = pool.Get(0);
    EXPECT_TRUE(stream);
    // A pool's first stream pins the memory of its marks, and its hand-back writes one: both
    // while the capture runs.
    CUDAStreamPool fresh;
    CUDAStreamLease first = fresh.Get(0);
    EXPECT_TRUE(first);
  });
  other.join();
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(capturing, &graph), cudaSuccess);
  if (graph != nullptr) {
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamDestroy(capturing), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace evpool
