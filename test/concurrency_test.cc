// BasicHandlePool under concurrency, through HostBackend: 2 to 64 threads doing random Get, Put and
// Purge on several devices, with faults injected into creates and events handed between threads;
// every scenario runs with per-thread caches on and off. The stream scenarios run the same over
// HostStreamBackend (the core's stream paths): tokens are put back busy at random, and some go
// back bare, for the pool to ask their device.
//
// Invariants checked:
// - no token is ever held by two holders at once (a ledger flag per token, flipped with RMWs);
// - every Get(d) returns an event that records d and whose token was created on d;
// - streams: no Get returns a token that is still busy;
// - none is lost: once the threads stop, created = destroyed + idle + held.
// Some scenarios put an idle limit on the pool, so that events are retired, reused and destroyed
// as surplus by threads at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_checks.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"
#include "support/sanitizers.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;

// Who holds which token. Relaxed RMWs suffice: all RMWs on one flag are totally ordered, so two
// holders at once means one of them reads the other's 1.
class Ledger {
 public:
  explicit Ledger(std::size_t capacity) : held_(capacity) {}

  void got(const Event &event, int device) {
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    if (serial >= held_.size()) {
      overflow_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (held_[serial].exchange(1, std::memory_order_relaxed) != 0)
      held_twice_.fetch_add(1, std::memory_order_relaxed);
    if (event.device_id() != device || HostBackend::device_of(event.get()) != device)
      wrong_device_.fetch_add(1, std::memory_order_relaxed);
  }

  void got_busy() { handed_busy_.fetch_add(1, std::memory_order_relaxed); }

  void giving_back(const Event &event) {
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    if (serial < held_.size() && held_[serial].exchange(0, std::memory_order_relaxed) != 1)
      returned_unheld_.fetch_add(1, std::memory_order_relaxed);
  }

  void expect_clean() const {
    EXPECT_EQ(overflow_.load(), 0u) << "ledger too small";
    EXPECT_EQ(held_twice_.load(), 0u) << "an event was handed to two holders at once";
    EXPECT_EQ(wrong_device_.load(), 0u) << "Get(d) returned an event of another device";
    EXPECT_EQ(returned_unheld_.load(), 0u) << "an event was returned by a non-holder";
    EXPECT_EQ(handed_busy_.load(), 0u) << "Get returned a stream whose work was pending";
  }

 private:
  std::vector<std::atomic<std::uint8_t>> held_;
  std::atomic<std::uint64_t> overflow_{0}, held_twice_{0}, wrong_device_{0}, returned_unheld_{0}, handed_busy_{0};
};

struct Scenario {
  int threads;
  int devices;
  bool faults;           // every 5th create attempt fails
  bool handoff;          // events got on one thread are put back by another
  bool purges;           // Purge runs among Gets and Puts
  bool cached;           // DefaultPoolPolicy (per-thread caches) or NoCachePolicy<>
  bool streams = false;  // HostStreamBackend
  // Per device: over it, Puts retire events, and Gets reuse them or destroy those found surplus
  // (detail/retired_handles.h).
  std::size_t idle_limit = kUnlimitedIdle;
  std::string name() const {
    return std::string(streams ? "streams_" : "") + std::to_string(threads) + "threads_" +
           std::to_string(devices) + "devices" + (faults ? "_faults" : "") + (handoff ? "_handoff" : "") +
           (purges ? "_purges" : "") +
           (idle_limit != kUnlimitedIdle ? "_limit" + std::to_string(idle_limit) : std::string()) +
           test::policy_suffix(cached);
  }
};

template <class Backend, class Policy>
void run_scenario(const Scenario &scenario) {
  using Pool = BasicHandlePool<Backend, Policy>;
  constexpr bool kStreams = BusyHandleBackend<Backend>;
  // A quarter under ThreadSanitizer (support/sanitizers.h), where the 64-thread scenarios took 14 s
  // each, and in checked mode (EVPOOL_CHECKED=1), where every call also goes through the checker's
  // table: what each judges is every call's order and outcome, which a quarter of the calls
  // exercises as well.
  const int total_operations = test::kThreadSanitizer || test::pools_are_checked() ? 100'000 : 400'000;
  constexpr std::size_t kMaxHeld = 6;
  const int operations = std::max(1000, total_operations / scenario.threads);

  Backend backend(scenario.devices);
  if (scenario.faults)
    backend.inject_create_fault([](std::uint64_t attempt, int) { return attempt % 5 == 0; });
  Pool pool(backend, Backend::kDefaultOptions, scenario.idle_limit);
  Ledger ledger(static_cast<std::size_t>(scenario.threads) * operations + 1);

  std::mutex handoff_mutex;
  std::vector<Event> handoff;  // events in flight between threads
  std::vector<std::vector<Event>> kept(static_cast<std::size_t>(scenario.threads));
  std::atomic<std::uint64_t> faults_seen{0};

  auto worker = [&](int thread_index) {
    std::mt19937 random(static_cast<unsigned>(7919 * thread_index + 1));
    std::vector<Event> &held = kept[static_cast<std::size_t>(thread_index)];
    auto pick_device = [&] { return static_cast<int>(random() % static_cast<unsigned>(scenario.devices)); };
    for (int op = 0; op < operations; ++op) {
      const unsigned action = random() % 100;
      if (action < 45 && held.size() < kMaxHeld) {
        const int device = pick_device();
        const bool use_current = random() % 2 == 0;
        if (use_current) backend.set_current_device(device);
        try {
          Event event = pool.Get(use_current ? -1 : device);
          ledger.got(event, device);
          if constexpr (kStreams)
            if (!backend.asked_idle_since_busy(event.get())) ledger.got_busy();
          held.push_back(std::move(event));
        } catch (const HostBackendFault &) {
          faults_seen.fetch_add(1, std::memory_order_relaxed);
        }
      } else if (action < 90 && !held.empty()) {
        const std::size_t which = random() % held.size();
        Event event = std::move(held[which]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(which));
        if (scenario.handoff && random() % 2 == 0) {
          std::lock_guard<std::mutex> lock(handoff_mutex);
          handoff.push_back(std::move(event));
          continue;
        }
        ledger.giving_back(event);
        // Put with -1 must use the event's own device even when another one is current.
        backend.set_current_device(pick_device());
        const int device = event.device_id();
        if constexpr (kStreams) {
          if (random() % 3 == 0) backend.make_busy(event.get(), 1 + random() % 3);  // work enqueued
          if (random() % 8 == 0) event = backend.adopt(event.release(), -1);        // bare: the pool asks it
        }
        pool.Put(std::move(event), random() % 2 == 0 ? -1 : device);
      } else if (action < 92 && scenario.purges) {
        pool.Purge();
      } else if (scenario.handoff) {
        Event event;
        {
          std::lock_guard<std::mutex> lock(handoff_mutex);
          if (handoff.empty()) continue;
          event = std::move(handoff.back());
          handoff.pop_back();
        }
        ledger.giving_back(event);
        pool.Put(std::move(event));
      }
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < scenario.threads; ++t) threads.emplace_back(worker, t);
  for (std::thread &thread : threads) thread.join();

  ledger.expect_clean();
  if (scenario.faults) {
    EXPECT_GT(faults_seen.load(), 0u);
  }

  std::uint64_t held = handoff.size();
  for (const auto &events : kept) held += events.size();
  pool.Purge();  // now idle = 0, so created = destroyed + held
  EXPECT_EQ(backend.created(), backend.destroyed() + held);
  handoff.clear();
  kept.clear();
  EXPECT_EQ(backend.created(), backend.destroyed());
  if constexpr (!test::kCached<Policy>) {
    EXPECT_LE(pool.node_count(), backend.created());  // a node holds one event
  } else {
    // A node is allocated only when no empty magazine is spare; every other node is then in a
    // depot holding at least one event, or held by a thread: its cache's loaded and previous
    // magazines of each device, plus one in its hands (being traded, or a Purge's spare).
    const auto per_thread = static_cast<std::size_t>(2 * scenario.devices + 1);
    EXPECT_LE(pool.node_count(), backend.created() + per_thread * static_cast<std::size_t>(scenario.threads));
  }
}

void PrintTo(const Scenario &scenario, std::ostream *out) { *out << scenario.name(); }

class PoolConcurrency : public testing::TestWithParam<Scenario> {};

TEST_P(PoolConcurrency, NoEventIsHeldTwiceLostOrOfTheWrongDevice) {
  const Scenario scenario = GetParam();
  test::with_policy(scenario.cached, [&]<class Policy>() {
    if (scenario.streams)
      run_scenario<test::HostStreamBackend, Policy>(scenario);
    else
      run_scenario<HostBackend, Policy>(scenario);
  });
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> all;
  for (bool cached : {true, false}) {
    for (int threads : {2, 4, 8, 16, 32, 64}) {
      all.push_back({threads, 1, false, false, false, cached});  // one head: ABA pressure
      all.push_back({threads, 4, true, true, true, cached});     // everything at once
    }
    all.push_back({8, 3, false, false, true, cached});
    all.push_back({8, 3, true, false, false, cached});
    all.push_back({8, 2, false, true, false, cached});
    for (int threads : {4, 16, 64}) all.push_back({threads, 4, true, true, true, cached, /*streams=*/true});
    all.push_back({16, 1, false, false, false, cached, /*streams=*/true});
    all.push_back({8, 2, false, true, false, cached, false, /*idle_limit=*/4});
    all.push_back({16, 1, true, true, true, cached, false, /*idle_limit=*/2});
    all.push_back({8, 2, true, true, true, cached, /*streams=*/true, /*idle_limit=*/4});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, PoolConcurrency, testing::ValuesIn(scenarios()),
                         [](const auto &info) { return info.param.name(); });

// Checked pools ask each other about every handle they have no record of (detail/handle_checker.h):
// threads make and destroy checked pools while the others' Puts of bare tokens that no pool handed
// out walk the list of checkers. Every such Put is accepted, every event is destroyed once, and no
// pool's end meets a walk on its checker.
TEST(CheckedPoolsConcurrency, PoolsMadeAndDestroyedWhileOthersAskThemAboutHandles) {
  HostBackend backend(1);
  constexpr int kThreads = 4, kRounds = 200;
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        BasicHandlePool<HostBackend> pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
        Event own = pool.Get(0);
        try {
          pool.Put(backend.adopt(backend.create(0, 0), -1));  // no pool handed it out: every other is asked
          pool.Put(std::move(own));
        } catch (const std::invalid_argument &) {
          refused.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  for (std::thread &thread : threads) thread.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(backend.created(), backend.destroyed());
}

}  // namespace
}  // namespace evpool
