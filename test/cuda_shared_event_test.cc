// CUDASharedEvent: sharing and deleters (no GPU needed: the handles are never given to CUDA), and
// pooled events on a real GPU (skipped without one).
#include "evpool/cuda_shared_event.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_availability.h"

namespace evpool {
namespace {

// A handle CUDA never sees: only compared and passed to the test's deleter.
cudaEvent_t fake_handle(std::uintptr_t value) { return reinterpret_cast<cudaEvent_t>(value); }

TEST(CUDASharedEvent, AnEmptyOneHoldsNothingAndEqualsNull) {
  const CUDASharedEvent empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.get(), nullptr);
  EXPECT_EQ(empty.use_count(), 0);
  EXPECT_EQ(empty, nullptr);
  EXPECT_EQ(nullptr, empty);
  EXPECT_EQ(empty, CUDASharedEvent());
}

TEST(CUDASharedEvent, CopiesShareTheHandleAndTheLastOneRunsTheDeleterOnce) {
  std::vector<cudaEvent_t> deleted;
  {
    CUDASharedEvent first(fake_handle(0x100), [&](cudaEvent_t handle) { deleted.push_back(handle); });
    EXPECT_TRUE(first);
    EXPECT_EQ(first.use_count(), 1);
    CUDASharedEvent second = first;
    EXPECT_EQ(first.use_count(), 2);
    EXPECT_EQ(second, first);
    EXPECT_EQ(second, fake_handle(0x100));
    EXPECT_EQ(static_cast<cudaEvent_t>(second), fake_handle(0x100));
    EXPECT_NE(second, fake_handle(0x200));
    EXPECT_NE(second, nullptr);

    first.reset();
    EXPECT_EQ(first, nullptr);
    EXPECT_EQ(first.use_count(), 0);
    EXPECT_EQ(second.use_count(), 1);
    EXPECT_TRUE(deleted.empty()) << "a copy is still alive";
  }
  EXPECT_EQ(deleted, std::vector<cudaEvent_t>{fake_handle(0x100)});
}

TEST(CUDASharedEvent, DistinctHandlesAreUnequal) {
  const CUDASharedEvent a(fake_handle(0x100), [](cudaEvent_t) {});
  const CUDASharedEvent b(fake_handle(0x200), [](cudaEvent_t) {});
  EXPECT_NE(a, b);
  EXPECT_NE(a, b.get());
}

TEST(CUDASharedEvent, AnEventWithADeleterIsHandedToItAndNotDestroyed) {
  std::vector<cudaEvent_t> deleted;
  {
    CUDAEvent event(fake_handle(0x300), 0);
    const CUDASharedEvent shared(std::move(event), [&](cudaEvent_t handle) { deleted.push_back(handle); });
    EXPECT_FALSE(event) << "the shared event took the handle";
    EXPECT_EQ(shared, fake_handle(0x300));
  }
  EXPECT_EQ(deleted, std::vector<cudaEvent_t>{fake_handle(0x300)});
}

TEST(CUDASharedEvent, CopiesDroppedOnManyThreadsRunTheDeleterExactlyOnce) {
  std::atomic<int> deletions{0};
  {
    const CUDASharedEvent original(fake_handle(0x400), [&](cudaEvent_t) { deletions.fetch_add(1); });
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([copy = original] {
        for (int i = 0; i < 10'000; ++i) {
          CUDASharedEvent another = copy;
          another.reset();
        }
      });
    for (std::thread &thread : threads) thread.join();
    EXPECT_EQ(original.use_count(), 1);
    EXPECT_EQ(deletions.load(), 0);
  }
  EXPECT_EQ(deletions.load(), 1);
}

// ---- Pooled events, on a real GPU ---------------------------------------------------------------

TEST(CUDASharedEventOnGpu, PooledCopiesCountTogetherAndTheLastReturnsTheEventToItsPool) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool pool;
  CUDASharedEvent shared = CUDASharedEvent::GetFromPool(pool, 0);
  const cudaEvent_t handle = shared.get();
  ASSERT_NE(handle, nullptr);
  {
    const CUDASharedEvent copy = shared;
    EXPECT_EQ(shared.use_count(), 2);
    shared.reset();
    EXPECT_EQ(copy.use_count(), 1);
    EXPECT_EQ(copy, handle);
  }
  CUDAEvent again = pool.Get(0);
  EXPECT_EQ(again.get(), handle) << "the last copy put the event back";
  EXPECT_EQ(again.device_id(), 0);
  pool.Put(std::move(again));
}

TEST(CUDASharedEventOnGpu, TheLastCopyDroppedOnAnotherThreadReturnsTheEventOnce) {
  EVPOOL_REQUIRE_GPU();
  CUDAEventPool pool;
  CUDASharedEvent shared = CUDASharedEvent::GetFromPool(pool, 0);
  const cudaEvent_t handle = shared.get();
  std::thread([moved = std::move(shared)]() mutable { moved.reset(); }).join();
  // The thread's cache went to the depot as it exited: Gets from here find the event, once.
  std::vector<CUDAEvent> got;
  std::set<cudaEvent_t> distinct;
  for (int i = 0; i < 4; ++i) {
    got.push_back(pool.Get(0));
    distinct.insert(got.back().get());
  }
  EXPECT_EQ(distinct.size(), got.size()) << "an event handed out twice";
  EXPECT_EQ(distinct.count(handle), 1u);
  for (CUDAEvent &event : got) pool.Put(std::move(event));
}

TEST(CUDASharedEventOnGpu, ACopyOutlivingItsPoolDestroysTheEventLater) {
  EVPOOL_REQUIRE_GPU();
  CUDASharedEvent survivor;
  {
    CUDAEventPool pool;
    survivor = CUDASharedEvent::GetFromPool(pool, 0);
  }
  ASSERT_TRUE(survivor);
  ASSERT_EQ(cudaEventRecord(survivor, 0), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(survivor), cudaSuccess);
  survivor.reset();  // no pool to return to: destroyed (ASan and the GPU suite would see misuse)
  EXPECT_FALSE(survivor);
}

TEST(CUDASharedEventOnGpu, CreateMakesAnUnpooledEventOfTheDevice) {
  EVPOOL_REQUIRE_GPU();
  CUDASharedEvent created = CUDASharedEvent::Create(0);
  ASSERT_TRUE(created);
  EXPECT_EQ(created.use_count(), 1);
  EXPECT_EQ(cudaEventRecord(created, 0), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(created), cudaSuccess);
}

}  // namespace
}  // namespace evpool
