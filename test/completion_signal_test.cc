// BasicCompletionQueue's completion signals (CompletionSignal::kAuto) through
// HostCompletionBackend, whose "GPU" writes a request's word when the test completes its work,
// and never for work that failed: one read of the newest word finishes a stream's FIFO without a
// query; pending requests cost reads, not queries, within the query interval; an error still
// reaches the callback through the rare event query, bounded per device whatever the streams
// pending, and a device fault heard there reaches all of the device's requests; order, handles
// given to new streams, the bound of 64 slots per thread and their reuse; and the fallbacks to
// event queries (no signal memory, a device that cannot, kEventQuery). Polled by the test
// (kCaller), but for the last test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "evpool/basic_completion_queue.h"
#include "support/host_completion_backend.h"
#include "support/host_completion_fixture.h"

namespace evpool {
namespace {

using test::HostCompletionBackend;
using test::HostWork;
using test::HostWorkStream;
using Queue = BasicCompletionQueue<HostCompletionBackend>;
using Completion = Queue::completion;
using namespace std::chrono_literals;

// Signals, and an interval between event queries long enough that no test pass reaches it.
constexpr CompletionQueueOptions kSignalled{.polling = CompletionPolling::kCaller,
                                            .signal = CompletionSignal::kAuto,
                                            .signal_query_interval = std::chrono::seconds(1)};

// The event queries that kSignalled's interval allows since `since`: none within the interval, which
// the tests that expect none stay within, unless their thread stalls a whole second.
std::uint64_t queries_allowed_since(std::chrono::steady_clock::time_point since) {
  return static_cast<std::uint64_t>((std::chrono::steady_clock::now() - since) / kSignalled.signal_query_interval);
}

CompletionQueueOptions signalled_every(std::chrono::nanoseconds interval) {
  CompletionQueueOptions options = kSignalled;
  options.signal_query_interval = interval;
  return options;
}

using CompletionSignalTest = test::HostCompletionFixture<>;

TEST_F(CompletionSignalTest, OneReadOfTheNewestSignalFinishesAStreamsRequestsWithoutAQuery) {
  const auto began = std::chrono::steady_clock::now();
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  std::vector<int> order;
  for (int i = 1; i <= 8; ++i)
    queue.notify(&stream, [&order, i](int status) { order.push_back(status == 0 ? i : -i); });
  EXPECT_EQ(queue.poll(), 0u);
  const CompletionQueueStats before = queue.stats();
  EXPECT_EQ(before.signalled, 8u);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 8u);
  const CompletionQueueStats after = queue.stats();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(after.signal_reads - before.signal_reads, 2u) << "the oldest's word, then the newest's";
  EXPECT_EQ(after.queries, backend_.queries());
  EXPECT_LE(backend_.queries(), queries_allowed_since(began)) << "an event was queried";
}

TEST_F(CompletionSignalTest, PendingRequestsAreReadNotQueriedWithinTheInterval) {
  const auto began = std::chrono::steady_clock::now();
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  for (int i = 0; i < 8; ++i) queue.notify(&stream);
  for (int pass = 0; pass < 10; ++pass) EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.stats().signal_reads, 10u) << "one read a pass, of the oldest";
  EXPECT_LE(backend_.queries(), queries_allowed_since(began));
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 8u);
}

TEST_F(CompletionSignalTest, CallbacksOfAStreamPartlyDoneRunInOrderAsTheirSignalsLand) {
  const auto began = std::chrono::steady_clock::now();
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  std::vector<int> order;
  for (int i = 1; i <= 8; ++i) queue.notify(&stream, [&order, i](int) { order.push_back(i); });
  stream.complete_through(5);
  EXPECT_EQ(queue.poll(), 5u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(queue.poll(), 0u);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 3u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_LE(backend_.queries(), queries_allowed_since(began));
}

// An interval that no stall of the test's thread reaches, however loaded the machine (a test that
// asserts the event is not asked within it fails on correct code if the thread stalls that long,
// and a host running the sanitizer builds and the fuzzer beside the tests stalls threads for
// milliseconds), and short enough to wait out.
constexpr auto kStallProofInterval = 250ms;

// A fault ends the stream's work and its signal writes never land: the event, queried once the
// interval has passed, brings the error; the request before the fault completes through its
// signal with success.
TEST_F(CompletionSignalTest, AnErrorReachesTheCallbackThoughTheSignalNeverLands) {
  HostWorkStream stream;
  Queue queue(backend_, signalled_every(kStallProofInterval));
  std::vector<int> statuses;
  for (int i = 0; i < 3; ++i) queue.notify(&stream, [&statuses](int status) { statuses.push_back(status); });
  stream.fail_from(2, 700);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 1u) << "the first request's signal landed";
  EXPECT_EQ(statuses, (std::vector<int>{0}));
  EXPECT_EQ(queue.poll(), 0u) << "within the interval, the event is not asked";
  const std::uint64_t queries_before = backend_.queries();
  EXPECT_EQ(queries_before, 0u);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (statuses.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    queue.poll();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(statuses, (std::vector<int>{0, 700, 700}));
  EXPECT_GE(backend_.queries(), 1u);
  EXPECT_LE(backend_.queries(), 4u) << "about one query per interval, not one per pass";
}

// A fault fails every request behind it on the stream, and none of their signals lands. Once the
// event of the oldest has told the error, the requests behind it are asked at once, in the same
// pass: waiting an interval for each, a FIFO of N failed requests took N intervals to hear its
// error (64 in flight: 64 ms at the default 1 ms), where the interval promises about one.
TEST_F(CompletionSignalTest, AnErrorHeardFromAnEventReachesTheRequestsBehindItInTheSamePass) {
  constexpr int kRequests = 6;
  HostWorkStream stream, other;
  std::vector<int> statuses;
  int other_status = -1;
  // After what its callbacks write: destroyed first.
  Queue queue(backend_, signalled_every(kStallProofInterval));
  for (int i = 0; i < kRequests; ++i)
    queue.notify(&stream, [&statuses](int status) { statuses.push_back(status); });
  queue.notify(&other, [&other_status](int status) { other_status = status; });
  stream.fail_from(1, 700);
  stream.complete_all();
  other.fail_from(1, 700);  // the context's error is sticky: the other stream's work fails too
  other.complete_all();
  EXPECT_EQ(queue.poll(), 0u) << "no signal landed, and the interval has not passed";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::size_t finished = 0;
  while (finished == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    finished = queue.poll();
  }
  EXPECT_EQ(finished, static_cast<std::size_t>(kRequests + 1))
      << "the pass that heard the error finished only some of the failed requests";
  EXPECT_EQ(statuses, std::vector<int>(kRequests, 700));
  EXPECT_EQ(other_status, 700);
}

TEST_F(CompletionSignalTest, WithAZeroIntervalAnErrorIsQueriedAtTheFirstMiss) {
  HostWorkStream stream;
  Queue queue(backend_, signalled_every(0ns));
  std::vector<int> statuses;
  for (int i = 0; i < 2; ++i) queue.notify(&stream, [&statuses](int status) { statuses.push_back(status); });
  stream.fail_from(1, 700);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(statuses, (std::vector<int>{700, 700}));
}

// Each pass asks the event of one request of the device not yet asked in the round, the first
// such in the poller's order of FIFOs. A FIFO that finishes hands its place to the newest one, so
// a device whose work keeps finishing and arriving (here: one request finished and one asked per
// pass) put each newcomer ahead of a request that was pending all along: that request, whose
// stream failed alone (its signal never lands, only its event tells), was never asked.
TEST_F(CompletionSignalTest, RequestsArrivingAndFinishingDoNotStarveAPendingRequestOfTheDevicesQuery) {
  constexpr int kPasses = 64;
  std::deque<HostWorkStream> arrivals;
  HostWorkStream failing;
  Queue queue(backend_, signalled_every(0ns));
  arrivals.emplace_back();
  queue.notify(&arrivals.back());
  Completion starved = queue.notify(&failing);
  failing.fail_from(1, 700);
  failing.complete_all();
  int passes = 0;
  for (; passes < kPasses && !starved.ready(); ++passes) {
    queue.poll();
    arrivals.back().complete_all();  // its signal lands: the next pass finishes it
    arrivals.emplace_back();
    queue.notify(&arrivals.back());
  }
  EXPECT_TRUE(starved.ready()) << "never asked in " << kPasses << " passes, one query each";
  EXPECT_LE(passes, 4);
  for (HostWorkStream &stream : arrivals) stream.complete_all();
}

constexpr int kPendingStreams = 512;

// One request on each of `streams`, asked by threads of 64 requests each (a thread's signal slots),
// which then exit: every request carries a signal.
std::vector<Completion> ask_from_threads(Queue &queue, std::vector<HostWorkStream> &streams) {
  constexpr std::size_t kPerThread = 64;
  std::vector<Completion> requests(streams.size());
  for (std::size_t first = 0; first < streams.size(); first += kPerThread) {
    std::thread([&, first] {
      for (std::size_t i = first; i < std::min(first + kPerThread, streams.size()); ++i)
        requests[i] = queue.notify(&streams[i]);
    }).join();
  }
  return requests;
}

// 512 FIFOs pending on one device, none of their signals landed. Each request's event was queried
// once per interval (at an interval of 0, at every pass): 512 queries a pass, the driver's
// serialised calls that the signals exist to avoid. Now the device's event queries are one per
// interval (one per pass at 0), whatever the streams pending, and go to each pending request in
// turn: work that fails on one stream only, whose signal never lands and whose own event alone
// says so, is still heard, within one round of the device's requests.
TEST_F(CompletionSignalTest, PendingSignalsCostOneEventQueryPerDeviceAndPassWhateverTheStreamsPending) {
  constexpr int kPasses = 100;
  std::vector<HostWorkStream> streams(kPendingStreams);
  Queue queue(backend_, signalled_every(0ns));
  std::vector<Completion> requests = ask_from_threads(queue, streams);
  for (int pass = 0; pass < kPasses; ++pass) EXPECT_EQ(queue.poll(), 0u);
  const CompletionQueueStats pending = queue.stats();
  EXPECT_EQ(pending.signalled, static_cast<std::uint64_t>(kPendingStreams));
  EXPECT_EQ(pending.queries, backend_.queries());
  EXPECT_LE(pending.queries, static_cast<std::uint64_t>(kPasses)) << "over " << kPasses << " passes";
  EXPECT_GE(pending.queries, static_cast<std::uint64_t>(kPasses / 2)) << "the device is asked";

  // Some requests were asked in this round already: the failed one is asked within two.
  const std::size_t failing = kPendingStreams / 3;
  streams[failing].fail_from(1, 700);
  streams[failing].complete_all();
  int passes = 0;
  while (!requests[failing].ready() && passes < 4 * kPendingStreams) {
    queue.poll();
    ++passes;
  }
  // Not ASSERT: the queue's destructor would wait for the other streams' work.
  EXPECT_TRUE(requests[failing].ready()) << "the failed stream's request was never asked";
  EXPECT_LE(passes, 2 * (kPendingStreams + 1));
  if (requests[failing].ready()) {
    EXPECT_EQ(requests[failing].status(), 700);
  }
  // The error, once heard, has every pending request of the device asked once, in that pass: its
  // own status, had the error been the device's.
  EXPECT_LE(queue.stats().queries - pending.queries, static_cast<std::uint64_t>(passes + kPendingStreams))
      << "over " << passes << " passes";
  EXPECT_EQ(queue.stats().completions, 1u) << "the others' work runs";
  for (HostWorkStream &stream : streams) stream.complete_all();
  EXPECT_EQ(queue.poll(), static_cast<std::size_t>(kPendingStreams - 1));
  for (const Completion &request : requests) EXPECT_TRUE(request.ready());
}

// A device fault (CUDA's sticky error) is heard by the device's one query of the pass, whichever
// request it asks, and then reaches every pending request of the device in that same pass: the
// queue sweeps its FIFOs again, asking each of them at once. Another device's request still waits
// for its own work.
TEST_F(CompletionSignalTest, ADeviceFaultHeardByOneQueryReachesEveryPendingRequestOfTheDeviceInThatPass) {
  std::vector<HostWorkStream> streams(kPendingStreams);  // device 0
  HostWorkStream healthy(1);
  Queue queue(backend_, signalled_every(0ns));
  std::vector<Completion> requests = ask_from_threads(queue, streams);
  Completion on_healthy = queue.notify(&healthy);
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.stats().signalled, static_cast<std::uint64_t>(kPendingStreams + 1));
  backend_.fault_device(0, 700);
  EXPECT_EQ(queue.poll(), static_cast<std::size_t>(kPendingStreams));
  for (const Completion &request : requests) {
    EXPECT_TRUE(request.ready());  // not ASSERT: the destructor would wait for `healthy`'s work
    if (request.ready()) {
      EXPECT_EQ(request.status(), 700);
    }
  }
  EXPECT_FALSE(on_healthy.ready());
  healthy.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(on_healthy.status(), HostCompletionBackend::kSuccess);
}

TEST_F(CompletionSignalTest, AHandleGivenToANewStreamDoesNotFinishTheOldStreamsRequests) {
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  std::vector<char> order;
  queue.notify(&stream, [&order](int) { order.push_back('A'); });
  queue.notify(&stream, [&order](int) { order.push_back('B'); });
  HostWork &old = stream.recreate();
  queue.notify(&stream, [&order](int) { order.push_back('C'); });
  old.complete_through(1);
  stream.complete_all();  // the new stream's C
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(order, (std::vector<char>{'A', 'C'})) << "B's work still runs";
  old.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(order, (std::vector<char>{'A', 'C', 'B'}));
}

// A thread holds 64 slots: its 65th request in flight goes without a signal (heard through its
// event), and once they are finished, the slots serve new requests, whose words still hold the
// values of the earlier ones: a request is only done once its own value, higher, lands.
TEST_F(CompletionSignalTest, SixtyFourSlotsPerThreadAreReusedAndOldValuesFinishNothing) {
  constexpr int kRequests = 70;
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  int calls = 0;
  for (int i = 0; i < kRequests; ++i) queue.notify(&stream, [&calls](int) { ++calls; });
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.stats().signalled, 64u);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), static_cast<std::size_t>(kRequests));
  for (int round = 0; round < 3; ++round) {
    std::vector<Completion> handles;
    for (int i = 0; i < 64; ++i) handles.push_back(queue.notify(&stream, [&calls](int) { ++calls; }));
    EXPECT_EQ(queue.poll(), 0u) << "round " << round << ": a slot's old value finished a new request";
    stream.complete_through(stream.enqueued() - 10);
    EXPECT_EQ(queue.poll(), 54u) << "round " << round;
    for (int i = 0; i < 54; ++i) EXPECT_TRUE(handles[i].ready());
    for (int i = 54; i < 64; ++i) EXPECT_FALSE(handles[i].ready());
    stream.complete_all();
    EXPECT_EQ(queue.poll(), 10u) << "round " << round;
  }
  EXPECT_EQ(queue.stats().signalled, 64u * 4);
  EXPECT_EQ(calls, kRequests + 3 * 64);
}

// A thread that exits leaves its block to the next thread, whose values go on from the block's
// sequence: the words still hold the values of the first thread's requests, which must finish none
// of the second's. And blocks come back: threads that ask one after another use one chunk.
TEST_F(CompletionSignalTest, ABlockLeftByAThreadThatExitedServesTheNextWithHigherValues) {
  Queue queue(backend_, kSignalled);
  for (int round = 0; round < 20; ++round) {
    HostWorkStream stream;
    std::vector<Completion> handles;
    std::thread([&] {
      for (int i = 0; i < 3; ++i) handles.push_back(queue.notify(&stream));
    }).join();
    EXPECT_EQ(queue.poll(), 0u) << "round " << round << ": an earlier thread's value finished a request";
    stream.complete_all();
    EXPECT_EQ(queue.poll(), 3u) << "round " << round;
    queue.poll();  // lets go of the exited thread's channel, and its block
  }
  EXPECT_EQ(queue.stats().signalled, 60u);
  EXPECT_EQ(backend_.signal_words(), detail::SignalSlotPool::kWordsPerChunk) << "blocks were not reused";
}

// The "GPU" writes data, then lands the signal (release, as the device's fence and write); the
// callback, run after the poller's acquire read of the word, reads the data: ThreadSanitizer
// reports a race if the read does not order the two (the seam's event queries add no order, and
// the interval keeps them out).
TEST_F(CompletionSignalTest, ACallbackSeesWhatTheWorkWroteBeforeItsSignalLanded) {
  HostWorkStream stream;
  int written_by_work = 0;
  int seen = -1;
  const auto began = std::chrono::steady_clock::now();
  Queue queue(backend_, kSignalled);
  queue.notify(&stream, [&](int status) { seen = status == 0 ? written_by_work : -2; });
  std::thread device([&] {
    written_by_work = 42;
    stream.complete_all();
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (queue.poll() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(seen, 42);
  // Within the interval, heard through the signal: an event query orders nothing here.
  EXPECT_LE(backend_.queries(), queries_allowed_since(began)) << "heard through the event";
  device.join();
}

TEST_F(CompletionSignalTest, TheSignalMemoryIsFreedWithTheQueueAndNoneIsTakenForEventQueries) {
  HostWorkStream stream;
  {
    Queue queue(backend_, kSignalled);
    queue.notify(&stream);
    EXPECT_GT(backend_.signal_words(), 0u);
    stream.complete_all();
  }
  EXPECT_EQ(backend_.signal_words(), 0u);
  {
    CompletionQueueOptions options = kSignalled;
    options.signal = CompletionSignal::kEventQuery;
    Queue queue(backend_, options);
    queue.notify(&stream);
    EXPECT_EQ(backend_.signal_words(), 0u);
    stream.complete_all();
    EXPECT_EQ(queue.poll(), 1u);
    EXPECT_EQ(queue.stats().signalled, 0u);
    EXPECT_EQ(queue.stats().queries, 1u);
  }
}

TEST_F(CompletionSignalTest, WithoutSignalMemoryTheQueueQueriesEvents) {
  backend_.refuse_signal_words();
  HostWorkStream stream;
  Queue queue(backend_, kSignalled);
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) queue.notify(&stream, [&statuses](int status) { statuses.push_back(status); });
  EXPECT_EQ(queue.poll(), 0u);
  stream.fail_from(4, 700);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(statuses, (std::vector<int>{0, 0, 0, 700}));
  EXPECT_EQ(queue.stats().signalled, 0u);
  EXPECT_EQ(queue.stats().signal_reads, 0u);
  EXPECT_GE(queue.stats().queries, 2u);
}

// Device 1 cannot make the signal write: its requests are heard through their events, device 0's
// through their signals, in one queue and one thread.
TEST_F(CompletionSignalTest, ADeviceThatCannotSignalIsHeardThroughItsEvents) {
  backend_.cannot_signal(1);
  HostWorkStream on_0(0), on_1(1);
  Queue queue(backend_, kSignalled);
  int done_0 = 0, done_1 = 0;
  for (int i = 0; i < 4; ++i) {
    queue.notify(&on_0, [&done_0](int status) { done_0 += status == 0; });
    queue.notify(&on_1, [&done_1](int status) { done_1 += status == 0; });
  }
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.stats().signalled, 4u);
  const std::uint64_t queries = backend_.queries();
  EXPECT_EQ(queries, 1u) << "only device 1's oldest is queried";
  on_0.complete_all();
  on_1.complete_all();
  EXPECT_EQ(queue.poll(), 8u);
  EXPECT_EQ(done_0, 4);
  EXPECT_EQ(done_1, 4);
  EXPECT_EQ(backend_.queries() - queries, 2u) << "device 1: the oldest and the newest";
}

// A record that enqueues no write (a device that cannot, a special handle) gives its slot back at
// once: held until its request finished, 64 requests in flight on such a device left the thread
// no slot for its requests on a device that can, which went without a signal.
TEST_F(CompletionSignalTest, ARequestWithoutASignalWriteHoldsNoSlot) {
  backend_.cannot_signal(1);
  HostWorkStream on_0(0), on_1(1);
  Queue queue(backend_, kSignalled);
  for (int i = 0; i < 64; ++i) queue.notify(&on_1);
  queue.notify(&on_0);
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(queue.stats().signalled, 1u) << "device 0's request went without a signal";
  on_0.complete_all();
  on_1.complete_all();
  EXPECT_EQ(queue.poll(), 65u);
}

TEST_F(CompletionSignalTest, TheSignalOptionsOutOfRangeAreRefusedByValue) {
  CompletionQueueOptions options;
  options.signal = static_cast<CompletionSignal>(7);
  EXPECT_THROW(Queue(backend_, options), std::invalid_argument);
  options = {};
  options.signal_query_interval = -1ns;
  EXPECT_THROW(Queue(backend_, options), std::invalid_argument);
  options.signal_query_interval = 2s;
  EXPECT_THROW(Queue(backend_, options), std::invalid_argument);
}

// The queue's own poller, and threads that ask while another completes work at random: every
// request once, each thread's in order, through signals.
TEST_F(CompletionSignalTest, ThreadsAskWhileWorkCompletesAndThePollerReadsSignals) {
  constexpr int kThreads = 4, kRequests = 2000;
  std::vector<HostWorkStream> streams(kThreads);
  std::atomic<bool> stop{false};
  std::vector<std::vector<int>> orders(kThreads);
  std::atomic<int> errors{0};
  {
    std::thread completer([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (HostWorkStream &stream : streams) stream.complete_through(stream.enqueued());
        std::this_thread::yield();
      }
    });
    {
      Queue queue(backend_, CompletionQueueOptions{.signal = CompletionSignal::kAuto});
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
          for (int i = 0; i < kRequests; ++i)
            queue.notify(&streams[t], [&, t, i](int status) {
              orders[t].push_back(i);
              if (status != 0) ++errors;
            });
        });
      for (std::thread &thread : threads) thread.join();
      for (HostWorkStream &stream : streams) stream.complete_all();
      // The poller counts a request signalled when it files it, which may come after the threads
      // are done asking: once every request is finished, every one is filed.
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (queue.stats().completions < std::uint64_t{kThreads * kRequests} &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      EXPECT_GT(queue.stats().signalled, 0u);
    }
    stop = true;
    completer.join();
  }
  EXPECT_EQ(errors.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(orders[t].size(), static_cast<std::size_t>(kRequests));
    for (int i = 0; i < kRequests; ++i) ASSERT_EQ(orders[t][i], i) << "thread " << t;
  }
  EXPECT_EQ(backend_.signal_words(), 0u);
}

}  // namespace
}  // namespace evpool
