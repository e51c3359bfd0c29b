// BasicEventPool through HostBackend: every public function and every error, single-threaded.
#include "evpool/basic_event_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Pool = BasicEventPool<HostBackend>;
using Event = HostBackend::Event;
using testing::HasSubstr;

class BasicEventPoolTest : public testing::Test {
 protected:
  void TearDown() override { backend.set_current_device(0); }

  // Expects `call` to throw E with a message containing each of `fragments`.
  template <class E, class Call>
  static void expect_error(Call call, const std::vector<std::string> &fragments) {
    try {
      call();
      ADD_FAILURE() << "no exception";
    } catch (const E &error) {
      for (const std::string &fragment : fragments) EXPECT_THAT(error.what(), HasSubstr(fragment));
    }
  }

  HostBackend backend{3};
  Pool pool{backend};
};

TEST_F(BasicEventPoolTest, GetCreatesAnEventOfTheRequestedDeviceOnAMiss) {
  Event event = pool.Get(2);
  ASSERT_TRUE(event);
  EXPECT_EQ(event.device_id(), 2);
  EXPECT_EQ(HostBackend::device_of(event.get()), 2);
  EXPECT_EQ(backend.created(), 1u);
}

TEST_F(BasicEventPoolTest, PutThenGetReusesTheEventWithoutCreating) {
  Event event = pool.Get(1);
  const auto token = event.get();
  pool.Put(std::move(event), 1);
  EXPECT_FALSE(event);  // NOLINT(bugprone-use-after-move): ownership moved into the pool
  Event again = pool.Get(1);
  EXPECT_EQ(again.get(), token);
  EXPECT_EQ(again.device_id(), 1);
  EXPECT_EQ(backend.created(), 1u);
}

TEST_F(BasicEventPoolTest, IdleEventsComeBackLastInFirstOut) {
  std::vector<Event> events;
  for (int i = 0; i < 3; ++i) events.push_back(pool.Get(0));
  std::vector<HostBackend::handle_type> tokens;
  for (Event &event : events) {
    tokens.push_back(event.get());
    pool.Put(std::move(event));
  }
  for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) EXPECT_EQ(pool.Get(0).release(), *it);
}

TEST_F(BasicEventPoolTest, EachDeviceHasItsOwnEvents) {
  Event on0 = pool.Get(0);
  pool.Put(std::move(on0));
  Event on1 = pool.Get(1);
  EXPECT_EQ(HostBackend::device_of(on1.get()), 1);
  EXPECT_EQ(backend.created(), 2u);
}

TEST_F(BasicEventPoolTest, GetWithMinusOneUsesTheCallingThreadsCurrentDevice) {
  backend.set_current_device(2);
  Event event = pool.Get();
  EXPECT_EQ(event.device_id(), 2);
  EXPECT_EQ(HostBackend::device_of(event.get()), 2);
}

TEST_F(BasicEventPoolTest, PutWithMinusOneFilesTheEventUnderItsOwnDevice) {
  Event event = pool.Get(1);
  const auto token = event.get();
  backend.set_current_device(2);  // DALI would file it under 2
  pool.Put(std::move(event));
  EXPECT_EQ(pool.Get(1).get(), token);
  EXPECT_EQ(backend.created(), 1u);
}

TEST_F(BasicEventPoolTest, PutOfAnAdoptedEventOfUnknownDeviceUsesTheCurrentDevice) {
  Event adopted = backend.adopt(backend.create(0, 2), -1);
  const auto token = adopted.get();
  backend.set_current_device(2);
  pool.Put(std::move(adopted));
  EXPECT_EQ(pool.Get(2).get(), token);
}

TEST_F(BasicEventPoolTest, PutOfAnAdoptedEventOfUnknownDeviceAcceptsAnExplicitDevice) {
  Event adopted = backend.adopt(backend.create(0, 1), -1);
  const auto token = adopted.get();
  pool.Put(std::move(adopted), 1);
  EXPECT_EQ(pool.Get(1).get(), token);
}

TEST_F(BasicEventPoolTest, GetOfAnOrdinalOutsideTheDevicesIsOutOfRange) {
  for (int bad : {3, -2, INT_MAX, INT_MIN})
    expect_error<std::out_of_range>([&] { pool.Get(bad); },
                                    {"Get", "device ordinal " + std::to_string(bad), "[0, 3)"});
  EXPECT_EQ(backend.create_attempts(), 0u);
}

TEST_F(BasicEventPoolTest, PutOfAnOrdinalOutsideTheDevicesIsOutOfRangeAndKeepsTheEvent) {
  Event event = pool.Get(0);
  const auto token = event.get();
  for (int bad : {3, -2, INT_MAX})
    expect_error<std::out_of_range>([&] { pool.Put(std::move(event), bad); },
                                    {"Put", "device ordinal " + std::to_string(bad), "[0, 3)"});
  EXPECT_EQ(event.get(), token);
  EXPECT_EQ(event.device_id(), 0);
}

TEST_F(BasicEventPoolTest, PutOfAnEventWhoseRecordedDeviceIsNotInThePoolIsOutOfRange) {
  Event stranger = backend.adopt(backend.create(0, 1), 7);
  expect_error<std::out_of_range>([&] { pool.Put(std::move(stranger)); }, {"device ordinal 7"});
  EXPECT_TRUE(stranger);
}

TEST_F(BasicEventPoolTest, PutOfAnEmptyOrMovedFromEventIsInvalid) {
  expect_error<std::invalid_argument>([&] { pool.Put(Event()); }, {"empty event"});
  Event event = pool.Get(0);
  Event taken = std::move(event);
  expect_error<std::invalid_argument>([&] { pool.Put(std::move(event)); }, {"empty event"});
  EXPECT_TRUE(taken);
}

TEST_F(BasicEventPoolTest, PutUnderAnotherDeviceThanTheEventsIsInvalidAndKeepsTheEvent) {
  Event event = pool.Get(1);
  const auto token = event.get();
  expect_error<std::invalid_argument>([&] { pool.Put(std::move(event), 2); },
                                      {"device 1", "under device 2", "still owns"});
  EXPECT_EQ(event.get(), token);
  EXPECT_EQ(event.device_id(), 1);
  pool.Put(std::move(event), 1);
  EXPECT_EQ(pool.Get(1).get(), token);
}

TEST_F(BasicEventPoolTest, AFailedCreateReachesTheCallerAndThePoolKeepsWorking) {
  Event kept = pool.Get(0);
  pool.Put(std::move(kept));
  backend.inject_create_fault([](std::uint64_t attempt, int) { return attempt == 2; });
  EXPECT_NO_THROW(pool.Get(0).reset());             // a hit: no create
  EXPECT_THROW(pool.Get(0), HostBackendFault);       // attempt 2 fails
  Event after = pool.Get(0);                         // attempt 3 succeeds
  EXPECT_TRUE(after);
  pool.Put(std::move(after));
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TEST_F(BasicEventPoolTest, PurgeDestroysIdleEventsAndLeavesHeldOnesAlone) {
  Event held = pool.Get(0);
  std::vector<Event> idle;
  for (int device : {0, 1, 2, 2}) idle.push_back(pool.Get(device));
  for (Event &event : idle) pool.Put(std::move(event));
  pool.Purge();
  EXPECT_EQ(backend.created(), 5u);
  EXPECT_EQ(backend.destroyed(), 4u);
  EXPECT_TRUE(held);

  // The nodes of the purged events are recycled: putting events back allocates none.
  const std::size_t nodes = pool.node_count();
  pool.Put(std::move(held));
  EXPECT_EQ(pool.node_count(), nodes);
  EXPECT_EQ(pool.Get(0).device_id(), 0);
  EXPECT_EQ(backend.created(), 5u);
}

TEST_F(BasicEventPoolTest, NodeCountIsThePeakOfIdleEvents) {
  std::vector<Event> events;
  for (int i = 0; i < 10; ++i) events.push_back(pool.Get(i % 3));
  for (Event &event : events) pool.Put(std::move(event));
  EXPECT_EQ(pool.node_count(), 10u);
  for (int round = 0; round < 5; ++round) {
    Event event = pool.Get(round % 3);
    pool.Put(std::move(event));
  }
  EXPECT_EQ(pool.node_count(), 10u);
}

TEST_F(BasicEventPoolTest, DestructionDestroysIdleEvents) {
  HostBackend other(2);
  {
    BasicEventPool<HostBackend> scoped(other);
    Event event = scoped.Get(1);
    scoped.Put(std::move(event));
    EXPECT_EQ(other.destroyed(), 0u);
  }
  EXPECT_EQ(other.created(), 1u);
  EXPECT_EQ(other.destroyed(), 1u);
}

TEST_F(BasicEventPoolTest, ReportsItsConfiguration) {
  EXPECT_EQ(pool.device_count(), 3);
  EXPECT_EQ(pool.event_flags(), HostBackend::kDefaultFlags);
  BasicEventPool<HostBackend> flagged(backend, 0x5u);
  EXPECT_EQ(flagged.event_flags(), 0x5u);
}

// A backend that reports a device count the pool cannot use.
struct DevicelessBackend : HostBackend {
  int device_count() const noexcept { return 0; }
};

TEST(BasicEventPoolConstruction, ABackendWithoutDevicesIsRejected) {
  try {
    BasicEventPool<DevicelessBackend> pool;
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument &error) {
    EXPECT_THAT(error.what(), HasSubstr("0 devices"));
  }
}

}  // namespace
}  // namespace evpool
