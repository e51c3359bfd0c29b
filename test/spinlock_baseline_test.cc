// The spinlock baseline against BasicHandlePool: both are LIFO per device, so the same sequence of
// explicit-device operations must hand out the same tokens in the same order from both.
#include "competitors/spinlock_event_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;

TEST(SpinlockBaseline, ReusesPutEventsAndDestroysIdleOnesOnPurge) {
  HostBackend backend(2);
  competitors::SpinlockEventPool<HostBackend> pool(backend);
  Event event = pool.Get(1);
  const auto token = event.get();
  pool.Put(std::move(event), 1);
  EXPECT_EQ(pool.Get(1).get(), token);  // the temporary dies here: destroyed, not put back
  EXPECT_EQ(backend.created(), 1u);
  Event idle = pool.Get(0);
  pool.Put(std::move(idle), 0);
  pool.Purge();
  EXPECT_EQ(backend.destroyed(), 2u);
}

TEST(SpinlockBaseline, HandsOutTheSameTokensAsBasicHandlePoolForTheSameOperations) {
  constexpr int kDevices = 3;
  HostBackend evpool_backend(kDevices);
  HostBackend baseline_backend(kDevices);
  BasicHandlePool<HostBackend> lock_free(evpool_backend);
  competitors::SpinlockEventPool<HostBackend> spinlock(baseline_backend);
  std::vector<Event> held_lock_free, held_spinlock;

  std::mt19937 random(12345);
  for (int step = 0; step < 20000; ++step) {
    const int device = static_cast<int>(random() % kDevices);
    const unsigned action = random() % 10;
    if (action < 5 || held_lock_free.empty()) {
      held_lock_free.push_back(lock_free.Get(device));
      held_spinlock.push_back(spinlock.Get(device));
      // The same token of each backend: its serial (the backends' own bits differ: host_backend.h).
      ASSERT_EQ(HostBackend::serial_of(held_lock_free.back().get()),
                HostBackend::serial_of(held_spinlock.back().get()))
          << "step " << step;
    } else if (action < 9) {
      const std::size_t which = random() % held_lock_free.size();
      const int owner = held_lock_free[which].device_id();
      lock_free.Put(std::move(held_lock_free[which]), owner);
      spinlock.Put(std::move(held_spinlock[which]), owner);
      held_lock_free.erase(held_lock_free.begin() + static_cast<std::ptrdiff_t>(which));
      held_spinlock.erase(held_spinlock.begin() + static_cast<std::ptrdiff_t>(which));
    } else {
      lock_free.Purge();
      spinlock.Purge();
      ASSERT_EQ(evpool_backend.destroyed(), baseline_backend.destroyed()) << "step " << step;
    }
  }
  EXPECT_EQ(evpool_backend.created(), baseline_backend.created());
}

}  // namespace
}  // namespace evpool
