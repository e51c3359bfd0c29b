// The completion queue's doorbell (detail/poller_wait.h) against a model of store buffers
// (support/store_buffer_atomic.h): the poller announces its sleep and then looks at the channels
// once more; a requester pushes its request and then reads the announcement. Each side stores,
// then loads the other's word (Dekker's pattern), so at least one must see the other, or the
// poller sleeps with a request waiting and nobody wakes it. Only sequential consistency on both
// stores gives that: weakened to release, a store may wait in its thread's store buffer while
// the load after it reads memory, as x86 does. The model lets a test run every order of the
// four steps, one simulated thread at a time, and see what each order lets through.
//
// Weakening either store to release fails this test. Weakening a load (ring()'s, or
// has_requests()'s) does not: every load reads memory at once in the model, as on x86, where the
// store's fence orders it; on Arm an acquire load may pass a release store, which no test on this
// machine can show.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>

#include "evpool/detail/poller_wait.h"
#include "evpool/detail/request_channel.h"
#include "support/store_buffer_atomic.h"

namespace evpool {
namespace {

using testing_support::SimulatedThread;
using testing_support::StoreBufferAtomic;

struct Request {
  Request *next = nullptr;
};
using Doorbell = detail::BasicPollerDoorbell<StoreBufferAtomic>;
using Channel = detail::RequestChannel<Request, StoreBufferAtomic>;

TEST(PollerDoorbell, APollerAboutToSleepAndARequesterNeverMissEachOtherInAnyOrder) {
  // Steps 0 and 1 are the poller's (announce, look), 2 and 3 the requester's (push, ring); each
  // thread's own steps stay in program order.
  std::array<int, 4> order{0, 1, 2, 3};
  int orders = 0;
  do {
    if (std::find(order.begin(), order.end(), 0) > std::find(order.begin(), order.end(), 1) ||
        std::find(order.begin(), order.end(), 2) > std::find(order.begin(), order.end(), 3))
      continue;
    ++orders;
    Doorbell doorbell;
    auto *channel = new Channel(Channel::kQueue);
    Request request;
    SimulatedThread poller, requester;
    bool poller_saw_request = false, requester_woke_poller = false;
    const std::array<std::pair<const char *, std::function<void()>>, 4> steps{{
        {"announce", [&] { poller.run([&] { doorbell.announce_sleep(); }); }},
        {"look", [&] { poller.run([&] { poller_saw_request = channel->has_requests(); }); }},
        {"push", [&] { requester.run([&] { channel->push(&request); }); }},
        {"ring", [&] { requester.run([&] { requester_woke_poller = doorbell.ring(); }); }},
    }};
    std::string taken;
    for (int step : order) {
      steps[static_cast<std::size_t>(step)].second();
      taken += steps[static_cast<std::size_t>(step)].first + std::string(" ");
    }
    EXPECT_TRUE(poller_saw_request || requester_woke_poller)
        << "in the order " << taken << "the poller found no request and the requester did not wake it";
    poller.drain();
    requester.drain();
    channel->let_go(Channel::kQueue);
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 6);
}

}  // namespace
}  // namespace evpool
