// DALI's own tests of its event pool and shared event (dali/core/cuda_event_pool_test.cc in
// NVIDIA/DALI, Apache-2.0), rewritten against evpool: the namespace is evpool and DALI's
// CUDAStream is a plain non-blocking cudaStream_t. The checks are DALI's; they pass here
// unchanged, which is what "drop-in" promises. Each skips without a GPU, as DALI's do.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <random>
#include <thread>
#include <vector>

#include "cuda_availability.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_shared_event.h"

namespace evpool {
namespace {

// DALI's EventPoolTest.PutGet: ten threads Get events of random devices (not the current one, in
// general), record and synchronise them on that device's stream, and Put them back.
TEST(DaliEventPoolTest, PutGet) {
  EVPOOL_REQUIRE_GPU();
  const int devices = testing_support::cuda_availability().devices;
  CUDAEventPool pool;

  std::vector<cudaStream_t> streams(devices);
  for (int device = 0; device < devices; ++device) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking), cudaSuccess);
  }

  std::vector<std::thread> threads;
  for (int t = 0; t < 10; ++t) {
    threads.emplace_back([&] {
      std::mt19937_64 rng;
      std::uniform_int_distribution<int> pick_device(0, devices - 1);
      for (int i = 0; i < 10000; ++i) {
        const int device = pick_device(rng);
        CUDAEvent event = pool.Get(device);
        ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
        ASSERT_EQ(cudaEventRecord(event, streams[device]), cudaSuccess);
        ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
        pool.Put(std::move(event));
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  for (int device = 0; device < devices; ++device) EXPECT_EQ(cudaStreamDestroy(streams[device]), cudaSuccess);
}

// DALI's CUDASharedEventTest.RefCounting, on the process-wide pool.
TEST(DaliCUDASharedEventTest, RefCounting) {
  EVPOOL_REQUIRE_GPU();
  CUDASharedEvent ev1 = CUDASharedEvent::GetFromPool();
  CUDASharedEvent ev2 = CUDASharedEvent::GetFromPool();
  ASSERT_EQ(ev1, ev1.get()) << "Sanity check failed - object not equal to itself.";
  ASSERT_NE(ev1.get(), nullptr) << "Sanity check failed - returned null instead of throwing.";
  ASSERT_NE(ev2.get(), nullptr) << "Sanity check failed - returned null instead of throwing.";
  ASSERT_NE(ev1, nullptr) << "Sanity check failed - comparison to null broken.";
  ASSERT_NE(ev1, ev2) << "Sanity check failed - returned the same object twice.";

  EXPECT_EQ(ev1.use_count(), 1);
  EXPECT_EQ(ev2.use_count(), 1);
  CUDASharedEvent ev3 = ev1;
  EXPECT_EQ(ev1, ev3);
  EXPECT_EQ(ev1.use_count(), 2);
  EXPECT_EQ(ev3.use_count(), 2);
  ev1.reset();
  EXPECT_EQ(ev1.use_count(), 0);
  EXPECT_EQ(ev3.use_count(), 1);
}

// DALI's CUDASharedEventTest.ReturnToPool: the sole event of a fresh pool comes back to the next
// GetFromPool once the first shared event is reset.
TEST(DaliCUDASharedEventTest, ReturnToPool) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool pool;

  CUDASharedEvent ev1 = CUDASharedEvent::GetFromPool(pool);
  EXPECT_NE(ev1, nullptr);
  cudaEvent_t orig = ev1.get();
  ev1.reset();
  EXPECT_EQ(ev1, nullptr);
  CUDASharedEvent ev2 = CUDASharedEvent::GetFromPool(pool);
  EXPECT_EQ(ev2.get(), orig) << "Should have got the sole event from the pool";
  ev1 = CUDASharedEvent::GetFromPool(pool);
  EXPECT_NE(ev1, ev2);
}

}  // namespace
}  // namespace evpool
