// The capture rules of evpool::wait and of graph-owned events (detail/capture_aware_wait.h), over
// fake streams that refuse what CUDA refuses while a stream captures (support/fake_capture.h), and
// a pool of host tokens.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/detail/capture_aware_wait.h"
#include "support/driver_free_threads.h"
#include "support/fake_capture.h"

namespace evpool {
namespace {

using test::FakeCaptureStreams;
using Pool = BasicHandlePool<test::DriverFreeCheckingBackend>;

constexpr int kProducer = 1, kConsumer = 2;
constexpr unsigned long long kCapture = 7, kOtherCapture = 9;

class CaptureAwareWait : public ::testing::Test {
 protected:
  HostBackend counters{2};
  test::DriverFreeCheckingBackend backend{counters};
  Pool pool{backend};
  FakeCaptureStreams streams;

  void wait() { detail::capture_aware_wait(streams, kConsumer, kProducer, pool); }
  std::int64_t outstanding() { return pool.stats().total().outstanding; }

  // The wait is refused with a message naming both streams' states; no call was made, no capture
  // was touched, and nothing is out of the pool.
  void expect_refused(const std::string &consumer_state, const std::string &producer_state) {
    const StreamCapture consumer_before = streams.state(kConsumer), producer_before = streams.state(kProducer);
    try {
      wait();
      ADD_FAILURE() << "the wait was not refused";
    } catch (const std::invalid_argument &error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("the consumer, stream 2, is " + consumer_state), std::string::npos) << message;
      EXPECT_NE(message.find("the producer, stream 1, is " + producer_state), std::string::npos) << message;
      EXPECT_NE(message.find("every capture is as it was"), std::string::npos) << message;
    }
    EXPECT_TRUE(streams.calls.empty()) << "a call was made before the refusal";
    EXPECT_TRUE(streams.refused.empty()) << streams.refused.front();
    EXPECT_EQ(streams.state(kConsumer).status, consumer_before.status);
    EXPECT_EQ(streams.state(kProducer).status, producer_before.status);
    EXPECT_EQ(outstanding(), 0);
  }
};

TEST_F(CaptureAwareWait, OutsideCaptureItRecordsOnTheProducerAndWaitsOnTheConsumer) {
  streams.add(kProducer, 1);
  streams.add(kConsumer, 0);
  wait();
  ASSERT_EQ(streams.calls.size(), 2u);
  EXPECT_EQ(streams.calls[0].what, "record");
  EXPECT_EQ(streams.calls[0].stream, kProducer);
  EXPECT_EQ(HostBackend::device_of(streams.calls[0].event), 1) << "an event of the producer's device";
  EXPECT_EQ(streams.calls[1].what, "wait");
  EXPECT_EQ(streams.calls[1].stream, kConsumer);
  EXPECT_EQ(streams.calls[1].device, 0) << "the wait is made on the consumer's device";
  EXPECT_EQ(outstanding(), 0) << "the event is back at once";
}

// An event recorded in an open capture must not reach another thread's capture while the first
// is open (the driver crashes: detail/capture_aware_wait.h), so the capture's graph keeps it.
TEST_F(CaptureAwareWait, BothStreamsInOneCaptureMakeAnEdgeAndTheGraphKeepsTheEvent) {
  streams.add(kProducer, 0, kCapture);
  streams.add(kConsumer, 0, kCapture);
  wait();
  EXPECT_TRUE(streams.refused.empty()) << streams.refused.front();
  EXPECT_EQ(streams.calls.size(), 2u);
  EXPECT_EQ(streams.state(kProducer).status, StreamCapture::kActive);
  EXPECT_EQ(streams.state(kConsumer).status, StreamCapture::kActive);
  EXPECT_EQ(streams.owners_of(kCapture), 1u);
  EXPECT_EQ(outstanding(), 1) << "out while the graph lives";
  streams.destroy_graph(kCapture);
  EXPECT_EQ(outstanding(), 0) << "back with the graph's end";
}

TEST_F(CaptureAwareWait, AConsumerNotCapturingJoinsTheProducersCapture) {
  streams.add(kProducer, 0, kCapture);
  streams.add(kConsumer, 0);
  wait();
  EXPECT_TRUE(streams.refused.empty()) << streams.refused.front();
  EXPECT_EQ(streams.state(kConsumer).status, StreamCapture::kActive);
  EXPECT_EQ(streams.state(kConsumer).id, kCapture);
  EXPECT_EQ(streams.owners_of(kCapture), 1u) << "the capture's graph keeps the event";
  streams.destroy_graph(kCapture);
  EXPECT_EQ(outstanding(), 0);
}

// The legacy default stream cannot join a capture: CUDA fails the wait and invalidates the
// producer's capture (H200, driver 580), so it is refused before any call.
TEST_F(CaptureAwareWait, TheLegacyStreamCannotJoinACaptureAndIsRefusedBeforeAnyCall) {
  constexpr int kLegacy = 0;
  streams.add(kProducer, 0, kCapture);
  streams.add(kLegacy, 0);
  try {
    detail::capture_aware_wait(streams, kLegacy, kProducer, pool);
    ADD_FAILURE() << "the wait was not refused";
  } catch (const std::invalid_argument &error) {
    EXPECT_NE(std::string(error.what()).find("cannot join a capture"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(streams.calls.empty());
  EXPECT_TRUE(streams.refused.empty()) << streams.refused.front();
  EXPECT_EQ(streams.state(kProducer).status, StreamCapture::kActive);
  EXPECT_EQ(outstanding(), 0);
}

TEST_F(CaptureAwareWait, ACaptureWaitingOnWorkOutsideItIsRefusedBeforeAnyCall) {
  streams.add(kProducer, 0);
  streams.add(kConsumer, 0, kCapture);
  expect_refused("capturing (capture 7)", "not capturing");
}

TEST_F(CaptureAwareWait, TwoCapturesWaitingOnEachOtherAreRefusedBeforeAnyCall) {
  streams.add(kProducer, 0, kOtherCapture);
  streams.add(kConsumer, 0, kCapture);
  expect_refused("capturing (capture 7)", "capturing (capture 9)");
}

TEST_F(CaptureAwareWait, AnInvalidatedCaptureIsRefusedOnEitherSide) {
  streams.add(kProducer, 0, kCapture);
  streams.add(kConsumer, 0, kCapture);
  streams.invalidate(kProducer);
  expect_refused("capturing (capture 7)", "in an invalidated capture");
  streams.add(kProducer, 0);
  streams.invalidate(kConsumer);
  expect_refused("in an invalidated capture", "not capturing");
}

class GraphOwnedEvents : public CaptureAwareWait {
 protected:
  detail::GraphOwned<std::uint64_t> take(bool record) {
    return detail::graph_owned_event(streams, kProducer, pool, record);
  }
};

TEST_F(GraphOwnedEvents, OutsideACaptureNothingIsTaken) {
  streams.add(kProducer, 0);
  for (bool record : {true, false}) {
    EXPECT_THROW(take(record), std::invalid_argument);
    EXPECT_EQ(pool.stats().total().gets, 0u);
  }
  EXPECT_TRUE(streams.calls.empty());
}

TEST_F(GraphOwnedEvents, TheGraphHoldsTheEventUntilItIsDestroyedOnADriverFreeThread) {
  streams.add(kProducer, 1, kCapture);
  const auto recorded = take(/*record=*/true);
  const auto awaited = take(/*record=*/false);
  EXPECT_EQ(recorded.device, 1);
  EXPECT_EQ(HostBackend::device_of(recorded.event), 1);
  ASSERT_EQ(streams.calls.size(), 2u);
  EXPECT_EQ(streams.calls[0].what, "record external");
  EXPECT_EQ(streams.calls[1].what, "wait external");
  EXPECT_EQ(streams.calls[1].event, awaited.event);
  EXPECT_EQ(streams.owners_of(kCapture), 2u);
  EXPECT_EQ(outstanding(), 2) << "the graph's events are out while it lives";
  std::thread([&] {
    test::this_thread_is_driver_free() = true;  // as CUDA's thread for user objects is
    streams.destroy_graph(kCapture);
  }).join();
  EXPECT_EQ(backend.calls_on_driver_free_threads(), 0);
  EXPECT_TRUE(detail::deferred_work_waiting()) << "the graph's end only hands the events over";
  EXPECT_EQ(outstanding(), 0) << "stats() runs the deferred work first: the events are back";
  EXPECT_EQ(pool.stats().devices[1].idle, 2u);
}

TEST_F(GraphOwnedEvents, WhenTheGraphCannotTakeTheEventItComesBackWithTheDeferredWork) {
  streams.add(kProducer, 0, kCapture);
  streams.fail_give_to_graph = true;
  EXPECT_THROW(take(true), std::runtime_error);
  EXPECT_TRUE(streams.calls.empty()) << "nothing recorded with an event the graph does not own";
  run_deferred_work();
  EXPECT_EQ(outstanding(), 0);
}

TEST_F(GraphOwnedEvents, WhenTheRecordFailsTheGraphKeepsTheEventAndGivesItBack) {
  streams.add(kProducer, 0, kCapture);
  streams.fail_external_record = true;
  EXPECT_THROW(take(true), std::runtime_error);
  EXPECT_EQ(outstanding(), 1) << "the graph owns it: it may not come back before the graph goes";
  streams.destroy_graph(kCapture);
  EXPECT_EQ(outstanding(), 0);
}

}  // namespace
}  // namespace evpool
