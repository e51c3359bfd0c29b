// BasicEventPool driven through every interleaving (up to a preemption bound), or a large seeded
// sample of them, by the deterministic scheduler. Each history is checked against what a
// sequential pool guarantees: no event is held by two holders at once, none is lost, and every
// Get(d) returns an event of device d.
//
// Bounds explored (the test prints the number of schedules it ran):
// - exhaustive, preemption bound 3: 2 threads x 3 operations, 1 device; 2 threads x 3 operations
//   with a Purge, 2 devices;
// - exhaustive, preemption bound 2: 3 threads x 2 operations, 1 device; 2 threads x 3 operations
//   with a Trim that keeps one event, 1 device;
// - 4,000 seeded random schedules: 3 threads x 4 operations with Purges, 2 devices.
// A 1-bit tag must fail these checks in the ABA scenario below; the production 32-bit tag must not.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "deterministic/deterministic_atomic.h"
#include "deterministic/deterministic_scheduler.h"
#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using testing_support::BoundedExhaustiveStrategy;
using testing_support::DeterministicAtomic;
using testing_support::DeterministicScheduler;
using testing_support::RandomStrategy;
using testing_support::Strategy;

template <unsigned TagBits>
struct DeterministicPolicy : DefaultPoolPolicy {
  template <class T>
  using atomic = DeterministicAtomic<T>;
  static constexpr unsigned tag_bits = TagBits;
  using backoff = detail::NoBackoff;  // spinning adds steps, not interleavings
  static constexpr unsigned cache_capacity = 2;  // magazines change hands within a few operations
  static void spin_wait() noexcept { DeterministicScheduler::yield_to_others(); }
};

// One operation of a thread's script.
struct Op {
  enum Kind { kGet, kPutOldest, kPurge, kTrimToOne } kind;
  int device = 0;
};

struct Scenario {
  int devices;
  std::vector<int> prewarm;  // devices of the events idle before the threads start
  std::vector<std::vector<Op>> threads;
};

// What a history violated, counted over all schedules.
struct Violations {
  int held_twice = 0, wrong_device = 0, lost = 0;  // lost: created != destroyed + held
  int total() const { return held_twice + wrong_device + lost; }
};

template <unsigned TagBits>
void run_one_schedule(const Scenario &scenario, Strategy &strategy, Violations &violations) {
  HostBackend backend(scenario.devices);
  BasicEventPool<HostBackend, DeterministicPolicy<TagBits>> pool(backend);
  {
    std::vector<HostBackend::Event> warm;
    for (int device : scenario.prewarm) warm.push_back(pool.Get(device));
    for (auto &event : warm) pool.Put(std::move(event));
    pool.FlushThreadCache();  // to the depots, where the scheduled threads find them
  }
  // Only one scheduled thread runs at a time, and the scheduler's hand-offs order them: plain
  // containers are safe here.
  std::vector<int> holders(64, 0);
  std::vector<std::vector<HostBackend::Event>> held(scenario.threads.size());
  bool wrong_device = false, held_twice = false;

  std::vector<std::function<void()>> bodies;
  for (std::size_t t = 0; t < scenario.threads.size(); ++t)
    bodies.push_back([&, t] {
      for (const Op &op : scenario.threads[t]) {
        if (op.kind == Op::kGet) {
          HostBackend::Event event = pool.Get(op.device);
          const auto serial = HostBackend::serial_of(event.get());
          if (holders.at(serial)++ != 0) held_twice = true;
          if (HostBackend::device_of(event.get()) != op.device || event.device_id() != op.device)
            wrong_device = true;
          held[t].push_back(std::move(event));
        } else if (op.kind == Op::kPutOldest && !held[t].empty()) {
          HostBackend::Event event = std::move(held[t].front());
          held[t].erase(held[t].begin());
          --holders.at(HostBackend::serial_of(event.get()));
          pool.Put(std::move(event));
        } else if (op.kind == Op::kPurge) {
          pool.Purge();
        } else if (op.kind == Op::kTrimToOne) {
          pool.Trim(1);
        }
      }
      pool.FlushThreadCache();  // hands the cache to the depot while the scheduler still runs us
    });
  DeterministicScheduler::run(bodies, strategy);

  violations.held_twice += held_twice;
  violations.wrong_device += wrong_device;
  if (held_twice) return;  // the lists may be corrupt: counting them proves nothing more
  std::uint64_t still_held = 0;
  for (const auto &events : held) still_held += events.size();
  pool.Purge();
  if (backend.created() != backend.destroyed() + still_held) ++violations.lost;
}

template <unsigned TagBits>
Violations explore_exhaustively(const Scenario &scenario, int preemption_bound, const char *label) {
  BoundedExhaustiveStrategy strategy(preemption_bound);
  Violations violations;
  long schedules = 0;
  do {
    run_one_schedule<TagBits>(scenario, strategy, violations);
    ++schedules;
  } while (strategy.next_schedule());
  std::printf("[ explored ] %s, %u-bit tag: %ld schedules (preemption bound %d), %d violations\n",
              label, TagBits, schedules, preemption_bound, violations.total());
  return violations;
}

template <unsigned TagBits>
Violations explore_randomly(const Scenario &scenario, int schedules, unsigned seed, const char *label) {
  Violations violations;
  for (int i = 0; i < schedules; ++i) {
    RandomStrategy strategy(seed + static_cast<unsigned>(i));
    run_one_schedule<TagBits>(scenario, strategy, violations);
  }
  std::printf("[ explored ] %s, %u-bit tag: %d random schedules (seeds %u..%u), %d violations\n", label,
              TagBits, schedules, seed, seed + static_cast<unsigned>(schedules) - 1, violations.total());
  return violations;
}

void expect_none(const Violations &v) {
  EXPECT_EQ(v.held_twice, 0) << "an event was held by two holders at once";
  EXPECT_EQ(v.wrong_device, 0) << "Get(d) returned an event of another device";
  EXPECT_EQ(v.lost, 0) << "created != destroyed + held after Purge";
}

constexpr Op Get(int device = 0) { return {Op::kGet, device}; }
constexpr Op Put() { return {Op::kPutOldest, 0}; }
constexpr Op Purge() { return {Op::kPurge, 0}; }
constexpr Op TrimToOne() { return {Op::kTrimToOne, 0}; }

TEST(Interleavings, TwoThreadsOnOneDevice) {
  const Scenario scenario{1, {0}, {{Get(), Put(), Get()}, {Get(), Put(), Get()}}};
  expect_none(explore_exhaustively<32>(scenario, 3, "2 threads x 3 ops, 1 device"));
}

TEST(Interleavings, TwoThreadsOnTwoDevicesWithPurge) {
  const Scenario scenario{2, {0, 1}, {{Get(0), Put(), Get(1)}, {Get(1), Purge(), Put()}}};
  expect_none(explore_exhaustively<32>(scenario, 3, "2 threads x 3 ops with Purge, 2 devices"));
}

TEST(Interleavings, TwoThreadsWithATrimThatKeepsSome) {
  const Scenario scenario{1, {0, 0, 0}, {{Get(), Put(), Get()}, {TrimToOne(), Get(), Put()}}};
  expect_none(explore_exhaustively<32>(scenario, 2, "2 threads x 3 ops with Trim(1), 1 device"));
}

TEST(Interleavings, ThreeThreadsOnOneDevice) {
  const Scenario scenario{1, {0, 0}, {{Get(), Put()}, {Get(), Put()}, {Get(), Put()}}};
  expect_none(explore_exhaustively<32>(scenario, 2, "3 threads x 2 ops, 1 device"));
}

TEST(Interleavings, ThreeThreadsRandomSample) {
  const Scenario scenario{2, {0, 1, 1},
                          {{Get(0), Get(1), Put(), Put()},
                           {Get(1), Purge(), Put(), Get(1)},
                           {Get(0), Put(), Get(0), Put()}}};
  expect_none(explore_randomly<32>(scenario, 4000, 1, "3 threads x 4 ops with Purge, 2 devices"));
}

// The ABA window. Get and Put move nodes between a device's event stack and its spare stack, both
// LIFO, so without Purge a node that returns to the top always has the same node below it and an
// ABA compare-exchange would be harmless. Purge reverses that order, and makes ABA real: thread A
// loads head (X, t) and reads X.next = Y; thread B purges (X, Y and Z move to the spare stack, their
// events destroyed), gets a new event and puts it back into node X, whose next is now nil: two
// writes of the head, which is (X, t + 2) again under a 1-bit tag. A's compare-exchange then
// succeeds and makes Y, a spare node holding a destroyed event, the top; A's second Get hands that
// event out. With 32 bits the tag has moved on and A retries.
const Scenario kAbaScenario{1, {0, 0, 0}, {{Get(), Get()}, {Purge(), Get(), Put()}}};

TEST(Interleavings, ANarrowTagLetsTheChecksSeeAnAbaCorruption) {
  const Violations narrow = explore_exhaustively<1>(kAbaScenario, 1, "ABA scenario");
  EXPECT_GT(narrow.total(), 0) << "the checks did not catch the ABA a 1-bit tag allows";
}

TEST(Interleavings, TheProductionTagPreventsTheAbaCorruption) {
  expect_none(explore_exhaustively<32>(kAbaScenario, 1, "ABA scenario"));
}

}  // namespace
}  // namespace evpool
