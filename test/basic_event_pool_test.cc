// BasicHandlePool through HostBackend: every public function and every error, single-threaded, with
// per-thread caches on and off (pool_policies.h).
#include "evpool/basic_handle_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "evpool/host_backend.h"
#include "pool_policies.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using test::BothPolicies;
using test::kCached;
using test::PolicyName;
using testing::HasSubstr;

// Expects `call` to throw E with a message containing each of `fragments`.
template <class E, class Call>
void expect_error(Call call, const std::vector<std::string> &fragments) {
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const E &error) {
    for (const std::string &fragment : fragments) EXPECT_THAT(error.what(), HasSubstr(fragment));
  }
}

template <class Policy>
class BasicHandlePoolTest : public testing::Test {
 protected:
  using Pool = BasicHandlePool<HostBackend, Policy>;
  void TearDown() override { backend.set_current_device(0); }

  HostBackend backend{3};
  Pool pool{backend};
};
TYPED_TEST_SUITE(BasicHandlePoolTest, BothPolicies, PolicyName);

TYPED_TEST(BasicHandlePoolTest, GetCreatesAnEventOfTheRequestedDeviceOnAMiss) {
  Event event = this->pool.Get(2);
  ASSERT_TRUE(event);
  EXPECT_EQ(event.device_id(), 2);
  EXPECT_EQ(HostBackend::device_of(event.get()), 2);
  EXPECT_EQ(this->backend.created(), 1u);
}

TYPED_TEST(BasicHandlePoolTest, PutThenGetReusesTheEventWithoutCreating) {
  Event event = this->pool.Get(1);
  const auto token = event.get();
  this->pool.Put(std::move(event), 1);
  EXPECT_FALSE(event);  // NOLINT(bugprone-use-after-move): ownership moved into the pool
  Event again = this->pool.Get(1);
  EXPECT_EQ(again.get(), token);
  EXPECT_EQ(again.device_id(), 1);
  EXPECT_EQ(this->backend.created(), 1u);
}

TYPED_TEST(BasicHandlePoolTest, IdleEventsComeBackLastInFirstOut) {
  std::vector<Event> events;
  for (int i = 0; i < 3; ++i) events.push_back(this->pool.Get(0));
  std::vector<HostBackend::handle_type> tokens;
  for (Event &event : events) {
    tokens.push_back(event.get());
    this->pool.Put(std::move(event));
  }
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) EXPECT_EQ(this->pool.Get(0).release(), *it);
}

TYPED_TEST(BasicHandlePoolTest, EachDeviceHasItsOwnEvents) {
  Event on0 = this->pool.Get(0);
  this->pool.Put(std::move(on0));
  Event on1 = this->pool.Get(1);
  EXPECT_EQ(HostBackend::device_of(on1.get()), 1);
  EXPECT_EQ(this->backend.created(), 2u);
}

TYPED_TEST(BasicHandlePoolTest, GetWithMinusOneUsesTheCallingThreadsCurrentDevice) {
  this->backend.set_current_device(2);
  Event event = this->pool.Get();
  EXPECT_EQ(event.device_id(), 2);
  EXPECT_EQ(HostBackend::device_of(event.get()), 2);
}

TYPED_TEST(BasicHandlePoolTest, PutWithMinusOneFilesTheEventUnderItsOwnDevice) {
  Event event = this->pool.Get(1);
  const auto token = event.get();
  this->backend.set_current_device(2);  // DALI would file it under 2
  this->pool.Put(std::move(event));
  EXPECT_EQ(this->pool.Get(1).get(), token);
  EXPECT_EQ(this->backend.created(), 1u);
}

TYPED_TEST(BasicHandlePoolTest, PutOfAnAdoptedEventOfUnknownDeviceUsesTheCurrentDevice) {
  Event adopted = this->backend.adopt(this->backend.create(0, 2), -1);
  const auto token = adopted.get();
  this->backend.set_current_device(2);
  this->pool.Put(std::move(adopted));
  EXPECT_EQ(this->pool.Get(2).get(), token);
}

TYPED_TEST(BasicHandlePoolTest, PutOfAnAdoptedEventOfUnknownDeviceAcceptsAnExplicitDevice) {
  Event adopted = this->backend.adopt(this->backend.create(0, 1), -1);
  const auto token = adopted.get();
  this->pool.Put(std::move(adopted), 1);
  EXPECT_EQ(this->pool.Get(1).get(), token);
}

TYPED_TEST(BasicHandlePoolTest, GetOfAnOrdinalOutsideTheDevicesIsOutOfRange) {
  for (int bad : {3, -2, INT_MAX, INT_MIN})
    expect_error<std::out_of_range>([&] { this->pool.Get(bad); },
                                    {"Get", "device ordinal " + std::to_string(bad), "[0, 3)"});
  EXPECT_EQ(this->backend.create_attempts(), 0u);
}

TYPED_TEST(BasicHandlePoolTest, LeasesOfAnOrdinalOutsideTheDevicesAreOutOfRangeAndNameTheCall) {
  expect_error<std::out_of_range>([&] { (void)this->pool.Lease(3); }, {"Lease", "device ordinal 3", "[0, 3)"});
  expect_error<std::out_of_range>([&] { (void)this->pool.LeaseShared(-2); },
                                  {"LeaseShared", "device ordinal -2", "[0, 3)"});
  EXPECT_EQ(this->backend.create_attempts(), 0u);
}

TYPED_TEST(BasicHandlePoolTest, PutOfAnOrdinalOutsideTheDevicesIsOutOfRangeAndKeepsTheEvent) {
  Event event = this->pool.Get(0);
  const auto token = event.get();
  for (int bad : {3, -2, INT_MAX})
    expect_error<std::out_of_range>([&] { this->pool.Put(std::move(event), bad); },
                                    {"Put", "device ordinal " + std::to_string(bad), "[0, 3)"});
  EXPECT_EQ(event.get(), token);
  EXPECT_EQ(event.device_id(), 0);
}

TYPED_TEST(BasicHandlePoolTest, PutOfAnEventWhoseRecordedDeviceIsNotInThePoolIsOutOfRange) {
  Event stranger = this->backend.adopt(this->backend.create(0, 1), 7);
  expect_error<std::out_of_range>([&] { this->pool.Put(std::move(stranger)); }, {"device ordinal 7"});
  // Named by the caller too: the recorded and the given device agree, and neither is the pool's.
  expect_error<std::out_of_range>([&] { this->pool.Put(std::move(stranger), 7); }, {"device ordinal 7"});
  EXPECT_TRUE(stranger);
}

TYPED_TEST(BasicHandlePoolTest, PutOfAnEmptyOrMovedFromEventIsInvalid) {
  expect_error<std::invalid_argument>([&] { this->pool.Put(Event()); }, {"empty event"});
  Event event = this->pool.Get(0);
  Event taken = std::move(event);
  expect_error<std::invalid_argument>([&] { this->pool.Put(std::move(event)); }, {"empty event"});
  EXPECT_TRUE(taken);
  // Empty, though it records a device of the pool, named or not.
  expect_error<std::invalid_argument>([&] { this->pool.Put(this->backend.adopt(0, 1), 1); }, {"empty event"});
  expect_error<std::invalid_argument>([&] { this->pool.Put(this->backend.adopt(0, 1)); }, {"empty event"});
}

TYPED_TEST(BasicHandlePoolTest, PutUnderAnotherDeviceThanTheEventsIsInvalidAndKeepsTheEvent) {
  Event event = this->pool.Get(1);
  const auto token = event.get();
  expect_error<std::invalid_argument>([&] { this->pool.Put(std::move(event), 2); },
                                      {"device 1", "under device 2", "still owns"});
  EXPECT_EQ(event.get(), token);
  EXPECT_EQ(event.device_id(), 1);
  this->pool.Put(std::move(event), 1);
  EXPECT_EQ(this->pool.Get(1).get(), token);
}

TYPED_TEST(BasicHandlePoolTest, AFailedCreateReachesTheCallerAndThePoolKeepsWorking) {
  Event kept = this->pool.Get(0);
  this->pool.Put(std::move(kept));
  this->backend.inject_create_fault([](std::uint64_t attempt, int) { return attempt == 2; });
  EXPECT_NO_THROW(this->pool.Get(0).reset());         // a hit: no create
  EXPECT_THROW(this->pool.Get(0), HostBackendFault);  // attempt 2 fails
  Event after = this->pool.Get(0);                    // attempt 3 succeeds
  EXPECT_TRUE(after);
  this->pool.Put(std::move(after));
  this->pool.Purge();
  EXPECT_EQ(this->backend.created(), this->backend.destroyed());
}

TYPED_TEST(BasicHandlePoolTest, PurgeDestroysIdleEventsAndLeavesHeldOnesAlone) {
  Event held = this->pool.Get(0);
  std::vector<Event> idle;
  for (int device : {0, 1, 2, 2}) idle.push_back(this->pool.Get(device));
  for (Event &event : idle) this->pool.Put(std::move(event));
  this->pool.Purge();  // with caches: the events are in the calling thread's cache
  EXPECT_EQ(this->backend.created(), 5u);
  EXPECT_EQ(this->backend.destroyed(), 4u);
  EXPECT_TRUE(held);

  // The nodes of the purged events are recycled: putting events back allocates none.
  const std::size_t nodes = this->pool.node_count();
  this->pool.Put(std::move(held));
  EXPECT_EQ(this->pool.node_count(), nodes);
  EXPECT_EQ(this->pool.Get(0).device_id(), 0);
  EXPECT_EQ(this->backend.created(), 5u);
}

TYPED_TEST(BasicHandlePoolTest, NodeCountIsThePeakOfIdleEventsOrOfMagazines) {
  std::vector<Event> events;
  for (int i = 0; i < 10; ++i) events.push_back(this->pool.Get(i % 3));
  for (Event &event : events) this->pool.Put(std::move(event));
  // Without caches (none in the policy, or a checked pool) a node holds one event; with them, one
  // magazine per device holds all of its (at most 4 here) idle events.
  const std::size_t expected = test::caches_on<TypeParam>() ? 3u : 10u;
  EXPECT_EQ(this->pool.node_count(), expected);
  for (int round = 0; round < 5; ++round) {
    Event event = this->pool.Get(round % 3);
    this->pool.Put(std::move(event));
  }
  EXPECT_EQ(this->pool.node_count(), expected);
}

TYPED_TEST(BasicHandlePoolTest, AThreadsFirstMagazinesHoldTheStartCapacity) {
  // 2 x start + 1 idle events of one device on one thread: the cache's two magazines fill, and
  // the next Put hands a full one to the depot and loads a third (one trade: too few for the
  // magazines to grow). Without caches, a node each.
  constexpr std::size_t kStart = TypeParam::cache_start_capacity;
  static_assert(!kCached<TypeParam> || TypeParam::cache_growth_trades > 1);
  const std::size_t count = test::caches_on<TypeParam>() ? 2 * kStart + 1 : 5;
  std::vector<Event> events;
  for (std::size_t i = 0; i < count; ++i) events.push_back(this->pool.Get(0));
  for (Event &event : events) this->pool.Put(std::move(event));
  EXPECT_EQ(this->pool.node_count(), test::caches_on<TypeParam>() ? 3u : count);
  events.clear();
  for (std::size_t i = 0; i < count; ++i) events.push_back(this->pool.Get(0));
  EXPECT_EQ(this->backend.created(), count) << "every idle event comes back, cache and depot";
}

TYPED_TEST(BasicHandlePoolTest, DestructionDestroysIdleEvents) {
  HostBackend other(2);
  {
    BasicHandlePool<HostBackend, TypeParam> scoped(other);
    Event event = scoped.Get(1);
    scoped.Put(std::move(event));
    EXPECT_EQ(other.destroyed(), 0u);
  }
  EXPECT_EQ(other.created(), 1u);
  EXPECT_EQ(other.destroyed(), 1u);
}

TYPED_TEST(BasicHandlePoolTest, ReportsItsConfiguration) {
  EXPECT_EQ(this->pool.device_count(), 3);
  EXPECT_EQ(this->pool.options(), HostBackend::kDefaultOptions);
  BasicHandlePool<HostBackend, TypeParam> flagged(this->backend, 0x5u);
  EXPECT_EQ(flagged.options(), 0x5u);
}

// A backend that reports a device count the pool cannot use.
struct DevicelessBackend : HostBackend {
  int device_count() const noexcept { return 0; }
};

template <class Policy>
class BasicHandlePoolConstruction : public testing::Test {};
TYPED_TEST_SUITE(BasicHandlePoolConstruction, BothPolicies, PolicyName);

TYPED_TEST(BasicHandlePoolConstruction, ABackendWithoutDevicesIsRejected) {
  try {
    BasicHandlePool<DevicelessBackend, TypeParam> pool;
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument &error) {
    EXPECT_THAT(error.what(), HasSubstr("0 devices"));
  }
}

}  // namespace
}  // namespace evpool
