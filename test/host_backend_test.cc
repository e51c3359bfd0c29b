#include "evpool/host_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/handle_backend.h"

namespace evpool {
namespace {

static_assert(HandleBackend<HostBackend>);

TEST(HostBackend, RejectsDeviceCountsOutsideItsRange) {
  EXPECT_THROW(HostBackend(0), std::invalid_argument);
  EXPECT_THROW(HostBackend(HostBackend::kMaxDevices + 1), std::invalid_argument);
  EXPECT_EQ(HostBackend(3).device_count(), 3);
}

TEST(HostBackend, TokensEncodeTheirDeviceAndAreUnique) {
  HostBackend backend(4);
  const auto a = backend.create(0, 3);
  const auto b = backend.create(0, 3);
  const auto c = backend.create(0, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(HostBackend::device_of(a), 3);
  EXPECT_EQ(HostBackend::device_of(c), 0);
  EXPECT_EQ(HostBackend::serial_of(a) + 1, HostBackend::serial_of(b));
  EXPECT_EQ(backend.created(), 3u);
  EXPECT_THROW(backend.create(0, 4), std::out_of_range);
  EXPECT_THROW(backend.create(0, -1), std::out_of_range);
}

// Checked pools compare handles by value across pools (detail/handle_checker.h), as CUDA keeps
// live handles unique in the process: tokens of two live backends must differ too, while each
// backend's serials still count from 1.
TEST(HostBackend, TokensOfTwoLiveBackendsDifferAndEachCountsFromOne) {
  HostBackend first(1), second(1);
  const auto a = first.create(0, 0);
  const auto b = second.create(0, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(HostBackend::serial_of(a), 1u);
  EXPECT_EQ(HostBackend::serial_of(b), 1u);
  EXPECT_EQ(HostBackend::device_of(b), 0);
  EXPECT_NE(HostBackend::backend_slot_of(a), HostBackend::backend_slot_of(b));
  HostBackend copy = second;  // copies share one state, and so one slot
  EXPECT_EQ(HostBackend::backend_slot_of(copy.create(0, 0)), HostBackend::backend_slot_of(b));
}

// A backend's slot is free again once its last copy is gone; only kMaxLiveBackends backends alive
// at once are refused one.
TEST(HostBackend, SlotsComeBackWhenTheirBackendDies) {
  std::vector<HostBackend> alive;
  try {
    for (int i = 0; i <= HostBackend::kMaxLiveBackends; ++i) alive.emplace_back(1);
    ADD_FAILURE() << "more than kMaxLiveBackends backends alive at once";
  } catch (const std::length_error &error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("more than 4096 HostBackends alive at once"));
  }
  ASSERT_FALSE(alive.empty());
  const int freed = HostBackend::backend_slot_of(alive.front().create(0, 0));
  alive.erase(alive.begin());
  HostBackend next(1);
  EXPECT_EQ(HostBackend::backend_slot_of(next.create(0, 0)), freed);
}

TEST(HostBackend, EventsDestroyTheirTokenOnceWhenTheyDie) {
  HostBackend backend(1);
  {
    HostBackend::Event event = backend.adopt(backend.create(0, 0), 0);
    EXPECT_TRUE(event);
    EXPECT_EQ(event.device_id(), 0);
    HostBackend::Event moved = std::move(event);
    EXPECT_FALSE(event);  // NOLINT(bugprone-use-after-move): checking the moved-from state
    EXPECT_EQ(event.device_id(), -1);
    EXPECT_TRUE(moved);
  }
  EXPECT_EQ(backend.destroyed(), 1u);

  HostBackend::Event released = backend.adopt(backend.create(0, 0), 0);
  const auto token = released.release();
  EXPECT_FALSE(released);
  backend.destroy(token);
  EXPECT_EQ(backend.destroyed(), 2u);
}

TEST(HostBackend, InjectedFaultsFailTheChosenAttempts) {
  HostBackend backend(2);
  backend.inject_create_fault([](std::uint64_t attempt, int device) { return attempt == 2 || device == 1; });
  EXPECT_NO_THROW(backend.create(0, 0));
  EXPECT_THROW(backend.create(0, 0), HostBackendFault);
  EXPECT_NO_THROW(backend.create(0, 0));
  EXPECT_THROW(backend.create(0, 1), HostBackendFault);
  backend.inject_create_fault({});
  EXPECT_NO_THROW(backend.create(0, 1));
  EXPECT_EQ(backend.create_attempts(), 5u);
  EXPECT_EQ(backend.created(), 3u);
}

TEST(HostBackend, CurrentDeviceBelongsToTheCallingThread) {
  HostBackend backend(3);
  backend.set_current_device(2);
  EXPECT_EQ(backend.current_device(), 2);
  int seen_by_other = -1;
  std::thread([&] { seen_by_other = backend.current_device(); }).join();
  EXPECT_EQ(seen_by_other, 0);
  EXPECT_THROW(backend.set_current_device(3), std::out_of_range);
  EXPECT_EQ(backend.current_device(), 2);
  backend.set_current_device(0);
}

}  // namespace
}  // namespace evpool
