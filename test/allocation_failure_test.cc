// Node allocation failure: Put must throw std::bad_alloc before taking ownership, and the pool must
// stay consistent. The global operator new of this test binary fails on demand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <utility>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace {
thread_local int allocations_until_failure = -1;  // -1: never fail

void *allocate(std::size_t size, std::size_t alignment) {
  if (allocations_until_failure == 0) {
    allocations_until_failure = -1;
    throw std::bad_alloc();
  }
  if (allocations_until_failure > 0) --allocations_until_failure;
  const std::size_t rounded = (size + alignment - 1) / alignment * alignment;
  void *memory = alignment <= alignof(std::max_align_t) ? std::malloc(size ? size : 1)
                                                        : std::aligned_alloc(alignment, rounded ? rounded : alignment);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}
}  // namespace

void *operator new(std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void *operator new[](std::size_t size) { return allocate(size, alignof(std::max_align_t)); }
void *operator new(std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void *operator new[](std::size_t size, std::align_val_t a) { return allocate(size, static_cast<std::size_t>(a)); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace evpool {
namespace {

using Event = HostBackend::Event;

TEST(AllocationFailure, PutThatCannotAllocateANodeThrowsAndTheCallerKeepsItsEvent) {
  HostBackend backend(1);
  BasicEventPool<HostBackend> pool(backend);
  // 64 nodes fit in the first chunk; the 65th Put needs a second chunk.
  std::vector<Event> events;
  for (int i = 0; i < 65; ++i) events.push_back(pool.Get(0));
  for (int i = 0; i < 64; ++i) pool.Put(std::move(events[static_cast<std::size_t>(i)]));

  Event &last = events.back();
  const auto token = last.get();
  allocations_until_failure = 0;
  EXPECT_THROW(pool.Put(std::move(last)), std::bad_alloc);
  EXPECT_EQ(last.get(), token) << "the caller must still own the event";
  EXPECT_EQ(pool.node_count(), 64u) << "a failed allocation claims no node";

  // The pool still works: the same Put now succeeds, and every event comes back out.
  pool.Put(std::move(last));
  std::vector<Event> again;
  for (int i = 0; i < 65; ++i) again.push_back(pool.Get(0));
  EXPECT_EQ(backend.created(), 65u);
  again.clear();
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TEST(AllocationFailure, AFailedFirstNodeLeavesAnEmptyWorkingPool) {
  HostBackend backend(2);
  BasicEventPool<HostBackend> pool(backend);
  Event event = pool.Get(1);
  allocations_until_failure = 0;
  EXPECT_THROW(pool.Put(std::move(event)), std::bad_alloc);
  EXPECT_TRUE(event);
  pool.Put(std::move(event));
  EXPECT_EQ(pool.Get(1).device_id(), 1);
  EXPECT_EQ(backend.created(), 1u);
}

}  // namespace
}  // namespace evpool
