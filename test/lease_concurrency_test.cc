// Leases under concurrency, through HostBackend: unique leases, shared leases whose copies are
// handed between threads and dropped anywhere, Reserve and Trim, all at once on several devices.
// Checked: no event is held by two leases at once (two unique ones, or a unique one and a shared
// one whose copies are not all gone), a shared lease's event stays while any copy holds it (copies
// are made and dropped on several threads at once), every lease has an event of the device it
// asked for, and none is lost: once every lease is gone and the pool purged, created = destroyed.
// The memory orders of the shared count show only under ThreadSanitizer, which ./tools/test runs
// this suite under.
// Every case runs with per-thread caches on and off, and some over HostStreamBackend, where unique
// leases end with their stream busy at random and no lease may begin with a busy one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

bool leased_busy(const test::HostStreamBackend &backend, std::uint64_t token) {
  return !backend.asked_idle_since_busy(token);
}
bool leased_busy(const HostBackend &, std::uint64_t) { return false; }

struct LeaseScenario {
  int threads;
  bool cached;           // DefaultPoolPolicy (per-thread caches) or NoCachePolicy<>
  bool streams = false;  // HostStreamBackend
  std::string name() const {
    return std::string(streams ? "streams_" : "") + std::to_string(threads) + "threads" +
           test::policy_suffix(cached);
  }
};

template <class Backend, class Policy>
void run_leases(int threads) {
  using Pool = BasicHandlePool<Backend, Policy>;
  constexpr bool kStreams = BusyHandleBackend<Backend>;
  constexpr int kDevices = 3;
  constexpr int kOperations = 4000;
  Backend backend(kDevices);
  std::uint64_t created = 0, destroyed = 0;
  {
    Pool pool(backend, HostBackend::kDefaultOptions, 16);
    const std::size_t serials = static_cast<std::size_t>(threads) * kOperations + 64;
    std::vector<std::atomic<std::uint8_t>> held_by_unique(serials);
    // Live copies of each shared lease, by its event's serial; a copy counts off just before it
    // is dropped, so the count is 0 by the time the last drop returns the event.
    std::vector<std::atomic<int>> shared_copies(serials);
    std::atomic<int> held_twice{0}, wrong_device{0}, moved_under_a_copy{0}, handed_busy{0};
    const auto busy = [&](auto handle) { return kStreams && leased_busy(backend, handle); };
    std::mutex board_mutex;
    std::vector<typename Pool::shared_lease> board;  // shared copies in flight between threads

    auto worker = [&](int t) {
      std::mt19937 random(static_cast<unsigned>(t * 31 + 7));
      std::vector<typename Pool::unique_lease> mine;
      for (int op = 0; op < kOperations; ++op) {
        const int device = static_cast<int>(random() % kDevices);
        switch (random() % 6) {
          case 0: {
            auto lease = pool.Lease(device);
            const auto serial = HostBackend::serial_of(lease.get());
            if (held_by_unique.at(serial).exchange(1, std::memory_order_relaxed) != 0) ++held_twice;
            if (shared_copies.at(serial).load() != 0) ++held_twice;
            if (lease.device_id() != device || HostBackend::device_of(lease.get()) != device) ++wrong_device;
            if (busy(lease.get())) ++handed_busy;
            mine.push_back(std::move(lease));
            break;
          }
          case 1:
            if (!mine.empty()) {
              held_by_unique.at(HostBackend::serial_of(mine.back().get())).store(0, std::memory_order_relaxed);
              if constexpr (kStreams)
                if (random() % 2 == 0)
                  backend.make_busy(mine.back().get(), 1 + random() % 3);  // work enqueued
              mine.pop_back();                                             // returns the event
            }
            break;
          case 2: {
            auto shared = pool.LeaseShared(device);
            const auto serial = HostBackend::serial_of(shared.get());
            if (held_by_unique.at(serial).load(std::memory_order_relaxed) != 0) ++held_twice;
            shared_copies.at(serial).fetch_add(2);
            if (shared.device_id() != device || HostBackend::device_of(shared.get()) != device)
              ++wrong_device;
            if (busy(shared.get())) ++handed_busy;
            std::lock_guard<std::mutex> lock(board_mutex);
            board.push_back(shared);
            board.push_back(std::move(shared));
            break;
          }
          case 3: {
            // A copy taken off the board, or, every other time, a new copy of one left there:
            // its increment then races other threads' drops of the same lease.
            typename Pool::shared_lease taken;
            {
              std::lock_guard<std::mutex> lock(board_mutex);
              if (board.empty()) break;
              if (op % 2 == 0) {
                taken = std::move(board.back());
                board.pop_back();
              } else {
                taken = board.back();
                shared_copies.at(HostBackend::serial_of(taken.get())).fetch_add(1);
              }
            }
            const auto serial = HostBackend::serial_of(taken.get());
            shared_copies.at(serial).fetch_sub(1);
            // The event read once more after counting off, right before the drop: a drop
            // elsewhere that returned it too early races this read (ThreadSanitizer reports it)
            // or has emptied it.
            if (HostBackend::serial_of(taken.get()) != serial) ++moved_under_a_copy;
            taken.reset();  // dropped outside the lock, concurrently with other copies
            break;
          }
          case 4:
            if (op % 64 == 0) pool.Trim(2);
            break;
          default:
            if (op % 128 == 0) pool.Reserve(device, 2);
            break;
        }
      }
      for (auto &lease : mine)
        held_by_unique.at(HostBackend::serial_of(lease.get())).store(0, std::memory_order_relaxed);
    };
    std::vector<std::thread> pool_threads;
    for (int t = 0; t < threads; ++t) pool_threads.emplace_back(worker, t);
    for (auto &thread : pool_threads) thread.join();
    board.clear();
    EXPECT_EQ(held_twice.load(), 0) << "an event was held by two leases at once";
    EXPECT_EQ(wrong_device.load(), 0) << "a lease got an event of another device";
    EXPECT_EQ(moved_under_a_copy.load(), 0) << "a shared lease's event left while a copy held it";
    EXPECT_EQ(handed_busy.load(), 0) << "a lease began with a stream whose work was pending";
  }
  created = backend.created();
  destroyed = backend.destroyed();
  EXPECT_EQ(created, destroyed) << "the pool's destruction must account for every event";
}

void PrintTo(const LeaseScenario &scenario, std::ostream *out) { *out << scenario.name(); }

class LeaseConcurrency : public testing::TestWithParam<LeaseScenario> {};

TEST_P(LeaseConcurrency, NothingIsHeldTwiceOrLost) {
  const LeaseScenario scenario = GetParam();
  test::with_policy(scenario.cached, [&]<class Policy>() {
    if (scenario.streams)
      run_leases<test::HostStreamBackend, Policy>(scenario.threads);
    else
      run_leases<HostBackend, Policy>(scenario.threads);
  });
}

std::vector<LeaseScenario> lease_scenarios() {
  std::vector<LeaseScenario> all;
  for (bool cached : {true, false}) {
    for (int threads : {2, 4, 8, 16, 32}) all.push_back({threads, cached});
    for (int threads : {4, 16}) all.push_back({threads, cached, /*streams=*/true});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Threads, LeaseConcurrency, testing::ValuesIn(lease_scenarios()),
                         [](const auto &info) { return info.param.name(); });

}  // namespace
}  // namespace evpool
