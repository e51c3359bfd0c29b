// BasicCompletionQueue through HostCompletionBackend, one step at a time: what a callback gets,
// in which order, how often the poller queries, what happens to errors, throwing callbacks,
// callbacks that ask for more, handles, the destructor, threads that exit, and the poller
// thread's sleep. Most tests poll by hand (kCaller), so each step is the test's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_completion_queue.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
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

// These tests are of the event queries (the fallback of completion signals, and what kEventQuery
// asks for): their query counts and errors are those of events. completion_signal_test.cc tests
// the signals.
constexpr CompletionQueueOptions kPolledByTest{.polling = CompletionPolling::kCaller,
                                               .signal = CompletionSignal::kEventQuery};

using CompletionQueueTest = test::HostCompletionFixture<>;

TEST_F(CompletionQueueTest, TheCallbackRunsOnceWhenTheWorkCompletesAndTheEventIsBackBeforeItIsReady) {
  Completion completion;
  int give_backs = 0, ready_at_give_back = 0;
  backend_.on_give_back([&] {
    ++give_backs;
    ready_at_give_back += completion.ready();
  });
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  int calls = 0;
  int status_seen = -100;
  std::uint64_t given_back_in_callback = 99;
  completion = queue.notify(&stream, [&](int status) {
    ++calls;
    status_seen = status;
    given_back_in_callback = backend_.given_back();
  });
  EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(completion.ready());

  stream.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(status_seen, HostCompletionBackend::kSuccess);
  EXPECT_EQ(given_back_in_callback, 0u) << "the event goes back after the callback";
  EXPECT_EQ(give_backs, 1);
  EXPECT_EQ(ready_at_give_back, 0) << "the handle was ready before its event went back to its pool";
  ASSERT_TRUE(completion.ready());
  EXPECT_EQ(backend_.given_back(), 1u) << "and before the request is ready";
  EXPECT_EQ(completion.status(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(completion.callback_exception(), nullptr);
  EXPECT_EQ(pool_.stats().total().outstanding, 0);

  for (int i = 0; i < 3; ++i) EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(calls, 1);
  const CompletionQueueStats stats = queue.stats();
  EXPECT_EQ(stats.requests, 1u);
  EXPECT_EQ(stats.completions, 1u);
}

TEST_F(CompletionQueueTest, CallbacksOfOneStreamRunInTheOrderOfTheRequests) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> order;
  for (int i = 1; i <= 8; ++i) queue.notify(&stream, [&order, i](int) { order.push_back(i); });
  stream.complete_through(3);
  EXPECT_EQ(queue.poll(), 3u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 5u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_F(CompletionQueueTest, OnlyTheOldestPendingRequestOfAStreamIsQueried) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  for (int i = 0; i < 8; ++i) queue.notify(&stream, [](int) {});
  const std::uint64_t before = backend_.queries();
  for (int pass = 0; pass < 10; ++pass) EXPECT_EQ(queue.poll(), 0u);
  EXPECT_EQ(backend_.queries() - before, 10u) << "one query a pass, of the oldest";
  EXPECT_EQ(queue.stats().queries, backend_.queries());

  // When the oldest has completed, the newest is asked: done too, so are all 8, in 2 queries.
  stream.complete_all();
  const std::uint64_t at_completion = backend_.queries();
  EXPECT_EQ(queue.poll(), 8u);
  EXPECT_EQ(backend_.queries() - at_completion, 2u);
}

TEST_F(CompletionQueueTest, AStreamPartlyDoneIsFinishedOneByOneAfterTheNewestSaysNotYet) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> order;
  for (int i = 1; i <= 8; ++i) queue.notify(&stream, [&order, i](int) { order.push_back(i); });
  stream.complete_through(5);
  const std::uint64_t before = backend_.queries();
  EXPECT_EQ(queue.poll(), 5u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5}));
  // 1 (done), 8 (not yet), 2 to 5 (done), 6 (not yet).
  EXPECT_EQ(backend_.queries() - before, 7u);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 3u);  // before `order` goes: the queue's destructor would run them after
}

TEST_F(CompletionQueueTest, CatchingUpKeepsTheStatusOfARequestThatWasNeverRecorded) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> statuses;
  const auto record = [&](int status) { statuses.push_back(status); };
  queue.notify(&stream, record);
  queue.notify(&stream, record);
  stream.fail_records(35);
  queue.notify(&stream, record);
  stream.fail_records(0);
  queue.notify(&stream, record);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(statuses, (std::vector<int>{0, 0, 35, 0}));
}

TEST_F(CompletionQueueTest, ANewestRequestThatFailedDoesNotFinishTheOthersWithItsError) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) queue.notify(&stream, [&](int status) { statuses.push_back(status); });
  stream.fail_from(4, 700);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(statuses, (std::vector<int>{0, 0, 0, 700}));
}

// A handle destroyed with its work running names the next stream created at once (CUDA does it):
// A and B on the first stream, C on the second. A done and C done say nothing of B, whose own
// work still runs: keyed by handle alone, the poller asked the newest (C) after A and finished B
// with it. (The fixture's check fails too: B's event went back with its work running.)
TEST_F(CompletionQueueTest, AHandleGivenToANewStreamDoesNotFinishTheOldStreamsRequests) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<std::string> done;
  const auto note = [&](std::string name) { return [&done, name](int) { done.push_back(name); }; };
  queue.notify(&stream, note("A"));
  Completion b = queue.notify(&stream, note("B"));
  HostWork &first = stream.recreate();
  queue.notify(&stream, note("C"));
  first.complete_through(1);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(done, (std::vector<std::string>{"A", "C"}));
  EXPECT_FALSE(b.ready()) << "B was reported done while its work ran";
  EXPECT_EQ(pool_.stats().total().outstanding, 1) << "B's event went back while its work ran";
  first.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(done, (std::vector<std::string>{"A", "C", "B"}));
}

// Where the backend cannot read a stream's id, the requests of a handle share one FIFO whatever
// stream the handle named, and it never catches up: each request is finished on its own query.
TEST_F(CompletionQueueTest, RequestsWithoutAStreamIdNeverCatchUp) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  stream.hide_stream_id(true);
  std::vector<int> order;
  for (int i = 1; i <= 4; ++i) queue.notify(&stream, [&order, i](int) { order.push_back(i); });
  stream.complete_all();
  std::uint64_t before = backend_.queries();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(backend_.queries() - before, 4u) << "one query per request: none caught up";
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));

  // 5 and 6 on the first stream, 7 on the next one to get the handle: 7 done says nothing of 6.
  for (int i = 5; i <= 6; ++i) queue.notify(&stream, [&order, i](int) { order.push_back(i); });
  HostWork &first = stream.recreate();
  queue.notify(&stream, [&order](int) { order.push_back(7); });
  first.complete_through(5);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 1u) << "6 is pending, and 7 waits behind it";
  first.complete_all();
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
}

// notify() with nothing to call: refused before any event is taken, the caller's object intact.
TEST_F(CompletionQueueTest, ACallbackThatConvertsToFalseIsRefusedBeforeAnEventIsTaken) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  const auto message_of = [&](auto &&callback) -> std::string {
    try {
      queue.notify(&stream, std::forward<decltype(callback)>(callback));
    } catch (const std::invalid_argument &error) {
      return error.what();
    }
    return "accepted";
  };
  void (*null_function)(int) = nullptr;
  EXPECT_NE(message_of(null_function).find("the callback is empty"), std::string::npos)
      << message_of(null_function);
  std::function<void(int)> empty;
  EXPECT_NE(message_of(std::move(empty)).find("the callback is empty"), std::string::npos);
  // Any callable that converts to false, as std::move_only_function does when empty.
  struct Unset {
    std::unique_ptr<int> kept = std::make_unique<int>(7);
    void operator()(int) const {}
    explicit operator bool() const { return false; }
  } unset;
  EXPECT_NE(message_of(std::move(unset)).find("the callback is empty"), std::string::npos);
  EXPECT_NE(unset.kept, nullptr) << "the refused callback was moved from";
  EXPECT_EQ(pool_.stats().total().gets, 0u) << "refused before any event was taken";
  EXPECT_EQ(queue.poll(), 0u) << "nothing was recorded";
  EXPECT_EQ(queue.stats().requests, 0u);

  // Callables that hold something to call are taken as before: a function, a pointer to one, a
  // lambda that converts to a function pointer, a std::function that holds one.
  static int calls;
  calls = 0;  // a static: the test may run again in the process (--gtest_repeat)
  struct Count {
    static void call(int) { ++calls; }
  };
  queue.notify(&stream, Count::call);
  queue.notify(&stream, &Count::call);
  queue.notify(&stream, [](int) { ++calls; });
  queue.notify(&stream, std::function<void(int)>(&Count::call));
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(calls, 4);
}

// A callback that waits for an unfinished request of its own queue would wait for itself: the
// pass that runs it is the only one that could finish the request. wait() throws instead (the
// callback's exception is kept in its handle); a request already done, or one of another queue,
// may be waited for.
TEST_F(CompletionQueueTest, WaitingInACallbackForAnUnfinishedRequestOfItsOwnQueueThrows) {
  Queue queue(backend_);  // its own poller thread: the callbacks run there
  HostWorkStream pending, done;
  done.complete_through(UINT64_MAX);
  Completion unfinished = queue.notify(&pending);
  Completion finished = queue.notify(&done);
  EXPECT_EQ(finished.wait(), HostCompletionBackend::kSuccess);
  int status_of_finished = -1;
  Completion waits_for_itself = queue.notify(&done, [&](int) { unfinished.wait(); });
  Completion waits_for_a_done_one = queue.notify(&done, [&](int) { status_of_finished = finished.wait(); });
  EXPECT_EQ(waits_for_itself.wait(), HostCompletionBackend::kSuccess);
  ASSERT_NE(waits_for_itself.callback_exception(), nullptr) << "the wait did not throw";
  try {
    std::rethrow_exception(waits_for_itself.callback_exception());
  } catch (const std::logic_error &error) {
    EXPECT_NE(std::string(error.what()).find("inside a polling pass of the request's own queue"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(waits_for_a_done_one.wait(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(waits_for_a_done_one.callback_exception(), nullptr);
  EXPECT_EQ(status_of_finished, HostCompletionBackend::kSuccess);
  EXPECT_FALSE(unfinished.ready());
  pending.complete_all();
  EXPECT_EQ(unfinished.wait(), HostCompletionBackend::kSuccess) << "outside a pass, the wait is fine";
}

// Passes nest: a callback of `outer` polls `inner`, whose callback waits. For a request of `outer`
// (its pass is on this thread, below) it throws; for one of a third queue with a poller thread
// of its own, it waits, and returns.
TEST_F(CompletionQueueTest, WaitingInANestedPassForARequestOfAnOuterQueueThrows) {
  Queue outer(backend_, kPolledByTest), inner(backend_, kPolledByTest), elsewhere(backend_);
  HostWorkStream pending, done, later;
  done.complete_through(UINT64_MAX);
  Completion of_outer = outer.notify(&pending);
  Completion of_elsewhere = elsewhere.notify(&later);
  bool threw = false;
  int elsewhere_status = -1;
  std::jthread completer;
  inner.notify(&done, [&](int) {
    try {
      of_outer.wait();
    } catch (const std::logic_error &) {
      threw = true;
    }
    completer = std::jthread([&] { later.complete_all(); });
    elsewhere_status = of_elsewhere.wait();
  });
  outer.notify(&done, [&](int) { EXPECT_EQ(inner.poll(), 1u); });
  EXPECT_EQ(outer.poll(), 1u);
  EXPECT_TRUE(threw) << "a request of the outer queue was waited for inside its pass";
  EXPECT_EQ(elsewhere_status, HostCompletionBackend::kSuccess);
  pending.complete_all();
  EXPECT_EQ(outer.poll(), 1u);
}

TEST_F(CompletionQueueTest, StreamsCompleteIndependently) {
  Queue queue(backend_, kPolledByTest);
  HostWorkStream slow, fast(1);
  std::vector<std::string> done;
  queue.notify(&slow, [&](int) { done.push_back("slow"); });
  queue.notify(&fast, [&](int) { done.push_back("fast"); });
  fast.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(done, std::vector<std::string>{"fast"});
  slow.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(done, (std::vector<std::string>{"fast", "slow"}));
}

TEST_F(CompletionQueueTest, AStickyErrorReachesEveryLaterCallback) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> statuses;
  for (int i = 0; i < 3; ++i) queue.notify(&stream, [&](int status) { statuses.push_back(status); });
  stream.fail_from(2, 700);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 3u);
  EXPECT_EQ(statuses, (std::vector<int>{0, 700, 700}));
  EXPECT_EQ(backend_.given_back(), 3u);
}

TEST_F(CompletionQueueTest, AFailedRecordReachesTheCallbackWithoutAQuery) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  stream.fail_records(35);
  int status_seen = 0;
  Completion completion = queue.notify(&stream, [&](int status) { status_seen = status; });
  const std::uint64_t before = backend_.queries();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(status_seen, 35);
  EXPECT_EQ(backend_.queries(), before);
  EXPECT_EQ(completion.status(), 35);
  EXPECT_EQ(pool_.stats().total().outstanding, 0) << "the event it got still goes back";
}

TEST_F(CompletionQueueTest, AnEventThatCannotBeCreatedReachesTheCallbackAsAStatus) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  events_.inject_create_fault([](std::uint64_t, int) { return true; });
  int status_seen = 0;
  queue.notify(&stream, [&](int status) { status_seen = status; });
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(status_seen, HostCompletionBackend::kCreateFailed);
}

TEST_F(CompletionQueueTest, ARefusedStreamLeavesTheCallbackWithTheCaller) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  stream.set_capturing(true);
  auto owned = std::make_unique<int>(7);
  auto callback = [owned = std::move(owned)](int) {};
  EXPECT_THROW(queue.notify(&stream, std::move(callback)), std::invalid_argument);
  EXPECT_EQ(pool_.stats().total().gets, 0u) << "refused before any event was taken";
  stream.set_capturing(false);
  int calls = 0;
  queue.notify(&stream, [&, callback = std::move(callback)](int) { ++calls; });
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 1u);
  EXPECT_EQ(calls, 1);
}

TEST_F(CompletionQueueTest, WhatACallbackCapturedIsLetGoOfOnceItRanNotWhenTheHandleGoes) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  auto buffer = std::make_shared<int>(0);
  Completion kept = queue.notify(&stream, [buffer](int) { ++*buffer; });
  Completion throwing = queue.notify(&stream, [buffer](int) { throw std::runtime_error("no"); });
  EXPECT_EQ(buffer.use_count(), 3);
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(*buffer, 1);
  EXPECT_EQ(buffer.use_count(), 1) << "both handles are alive, their captures are gone";
}

TEST_F(CompletionQueueTest, AThrowingCallbackIsKeptInItsHandleAndTheOthersStillRun) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  int after = 0;
  Completion throwing = queue.notify(&stream, [](int) { throw std::runtime_error("callback failed"); });
  Completion next = queue.notify(&stream, [&](int) { ++after; });
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 2u);
  EXPECT_EQ(after, 1);
  ASSERT_TRUE(throwing.ready());
  EXPECT_THROW(std::rethrow_exception(throwing.callback_exception()), std::runtime_error);
  EXPECT_EQ(throwing.status(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(next.callback_exception(), nullptr);
  EXPECT_EQ(backend_.given_back(), 2u);
  EXPECT_EQ(queue.stats().callback_exceptions, 1u);
}

// A capture whose destructor may throw (noexcept(false)): it waits for a request, and a wait for
// an unfinished request of the queue whose pass destroys the capture throws std::logic_error.
// Moved from, it waits for nothing.
class WaitsWhenDestroyed {
 public:
  explicit WaitsWhenDestroyed(const Completion &request) noexcept : request_(&request) {}
  WaitsWhenDestroyed(WaitsWhenDestroyed &&other) noexcept
      : request_(std::exchange(other.request_, nullptr)) {}
  WaitsWhenDestroyed &operator=(WaitsWhenDestroyed &&) = delete;
  ~WaitsWhenDestroyed() noexcept(false) {
    if (request_ != nullptr) request_->wait();
  }

 private:
  const Completion *request_;
};

void expect_logic_error(const std::exception_ptr &thrown, const std::string &what) {
  ASSERT_NE(thrown, nullptr) << "nothing was thrown";
  try {
    std::rethrow_exception(thrown);
  } catch (const std::logic_error &error) {
    EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
  } catch (...) {
    ADD_FAILURE() << "not a std::logic_error";
  }
}

// The captures are destroyed on the polling thread once the callback ran. One whose destructor
// throws used to end the process (std::terminate: it was destroyed in a noexcept destructor);
// its exception now reaches the handle as a callback's does, and the queue goes on. If the call
// threw too, the call's exception is kept. Both modes: the poller thread and the caller's poll().
TEST_F(CompletionQueueTest, ACaptureWhoseDestructorThrowsIsKeptInItsHandleLikeACallbacksException) {
  for (const CompletionPolling polling : {CompletionPolling::kCaller, CompletionPolling::kOwnThread}) {
    SCOPED_TRACE(polling == CompletionPolling::kCaller ? "kCaller" : "kOwnThread");
    HostWorkStream pending, done;
    done.complete_through(UINT64_MAX);
    const std::uint64_t given_back_before = backend_.given_back();
    Queue queue(backend_, {.polling = polling, .signal = CompletionSignal::kEventQuery});
    const Completion unfinished = queue.notify(&pending);
    int calls = 0;
    Completion throws_when_destroyed =
        queue.notify(&done, [&calls, capture = WaitsWhenDestroyed(unfinished)](int) { ++calls; });
    Completion throws_twice = queue.notify(
        &done, [capture = WaitsWhenDestroyed(unfinished)](int) { throw std::runtime_error("the call's own"); });
    Completion after = queue.notify(&done, [&calls](int) { ++calls; });
    if (polling == CompletionPolling::kCaller) {
      EXPECT_EQ(queue.poll(), 3u);
    }
    EXPECT_EQ(after.wait(), HostCompletionBackend::kSuccess);
    EXPECT_EQ(calls, 2);
    ASSERT_TRUE(throws_when_destroyed.ready());
    EXPECT_EQ(throws_when_destroyed.status(), HostCompletionBackend::kSuccess);
    expect_logic_error(throws_when_destroyed.callback_exception(),
                       "inside a polling pass of the request's own queue");
    ASSERT_TRUE(throws_twice.ready());
    EXPECT_THROW(std::rethrow_exception(throws_twice.callback_exception()), std::runtime_error);
    EXPECT_EQ(after.callback_exception(), nullptr);
    EXPECT_EQ(queue.stats().callback_exceptions, 2u) << "one per request, whatever threw";
    EXPECT_EQ(backend_.given_back() - given_back_before, 3u) << "their events went back";
    pending.complete_all();
  }
}

TEST_F(CompletionQueueTest, ACallbackMayAskForMoreAndMayCallPoll) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::vector<int> order;
  std::size_t polled_inside = 99;
  std::function<void(int)> chain = [&](int) {
    order.push_back(static_cast<int>(order.size()));
    polled_inside = queue.poll();
    if (order.size() < 5) queue.notify(&stream, chain);
  };
  queue.notify(&stream, chain);
  for (int i = 0; i < 10 && order.size() < 5; ++i) {
    stream.complete_all();
    queue.poll();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(polled_inside, 0u) << "a poll inside a callback finds the poller busy";
  EXPECT_EQ(queue.stats().completions, 5u);
}

TEST_F(CompletionQueueTest, TheDestructorRunsEveryPendingCallbackIncludingThoseTheyAskFor) {
  HostWorkStream stream;
  std::atomic<int> calls{0};
  Completion first;
  std::jthread completer;
  {
    Queue queue(backend_, kPolledByTest);
    first = queue.notify(&stream, [&](int) {
      ++calls;
      queue.notify(&stream, [&](int) { ++calls; });
    });
    for (int i = 0; i < 9; ++i) queue.notify(&stream, [&](int) { ++calls; });
    completer = std::jthread([&](std::stop_token stop) {
      while (!stop.stop_requested()) {
        std::this_thread::sleep_for(1ms);
        stream.complete_all();
      }
    });
  }
  EXPECT_EQ(calls.load(), 11);
  EXPECT_TRUE(first.ready()) << "a handle outlives its queue";
  EXPECT_EQ(first.status(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(backend_.given_back(), 11u);
}

// A callback that destroys its own queue: the pass that runs it cannot end while the destructor
// waits for it. kCaller: the destructor's drain waited, for ever, for the `polling_` that the
// poll() running the callback held. The destructor now returns at once, and that poll() finishes
// the destruction once its pass is over, as the destructor would have: it waits for every
// request (here, one that the callback's work completes), runs every callback once, and only
// then returns, counting them all.
TEST_F(CompletionQueueTest, ACallbackThatDestroysItsQueueLeavesTheDestructionToThePollThatRanIt) {
  HostWorkStream done, later;
  done.complete_through(UINT64_MAX);
  auto queue = std::make_unique<Queue>(backend_, kPolledByTest);
  std::vector<std::string> ran;
  Completion pending = queue->notify(&later, [&](int) { ran.push_back("pending"); });
  Completion before = queue->notify(&done, [&](int) { ran.push_back("before"); });
  Completion destroys = queue->notify(&done, [&](int) {
    later.complete_all();
    queue.reset();
    ran.push_back("destroys");
  });
  Completion after = queue->notify(&done, [&](int) { ran.push_back("after"); });
  Queue *const polled = queue.get();
  EXPECT_EQ(polled->poll(), 4u) << "the pass's three, and the one its destruction waited for";
  EXPECT_EQ(queue, nullptr);
  EXPECT_EQ(ran, (std::vector<std::string>{"before", "destroys", "after", "pending"}));
  for (const Completion *request : {&pending, &before, &destroys, &after}) {
    ASSERT_TRUE(request->ready());
    EXPECT_EQ(request->status(), HostCompletionBackend::kSuccess);
  }
  EXPECT_EQ(backend_.given_back(), 4u);
  EXPECT_EQ(pool_.stats().total().outstanding, 0);
}

// A callback that ran earlier in the pass asked for more: its request is still in the polling
// thread's channel, not yet in a FIFO, when a later callback destroys the queue. The destruction
// that the pass finishes must take it from there and run its callback, as the destructor would.
TEST_F(CompletionQueueTest, ARequestAskedEarlierInThePassThatDestroysTheQueueIsStillFinished) {
  for (const CompletionPolling polling : {CompletionPolling::kCaller, CompletionPolling::kOwnThread}) {
    SCOPED_TRACE(polling == CompletionPolling::kCaller ? "kCaller" : "kOwnThread");
    HostWorkStream done;
    done.complete_through(UINT64_MAX);
    const std::uint64_t given_back_before = backend_.given_back();
    auto queue = std::make_unique<Queue>(backend_, CompletionQueueOptions{.polling = polling});
    std::atomic<int> asked_ran{0};
    Completion asked;
    Completion asks =
        queue->notify(&done, [&](int) { asked = queue->notify(&done, [&](int) { ++asked_ran; }); });
    Completion destroys = queue->notify(&done, [&](int) { queue.reset(); });
    if (polling == CompletionPolling::kCaller) {
      EXPECT_EQ(queue->poll(), 3u) << "the pass's two, and the one asked before the destruction";
    }
    EXPECT_EQ(destroys.wait(), HostCompletionBackend::kSuccess);
    // Not ASSERT: on failure the request is never finished, and waiting for it would hang.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (asked_ran.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(asked_ran.load(), 1) << "the request asked before the destruction was dropped";
    if (asked_ran.load() == 1) {
      EXPECT_EQ(asked.wait(), HostCompletionBackend::kSuccess);
      // The poller's last give-back comes before the handle is done: all three are back.
      EXPECT_EQ(backend_.given_back() - given_back_before, 3u);
    }
  }
}

// The same on the queue's own poller thread, where the destructor joined the thread it ran on
// (std::system_error in a noexcept function: std::terminate). The poller now finishes the
// destruction and ends: it still waits for the queue's requests, and frees the queue's core
// (whose backend holds `token`, whose deleter says so) once they are done.
TEST_F(CompletionQueueTest, ACallbackThatDestroysItsQueueOnThePollerLeavesTheDestructionToThePoller) {
  struct TokenBackend : HostCompletionBackend {
    std::shared_ptr<void> token;
  };
  using TokenQueue = BasicCompletionQueue<TokenBackend>;
  std::atomic<bool> core_freed{false};
  // Release: the poller's last use of the streams below comes before; the test's acquire load
  // sees it, before the streams are destroyed.
  std::shared_ptr<void> token(nullptr, [&](void *) { core_freed.store(true, std::memory_order_release); });
  HostWorkStream done, later;
  done.complete_through(UINT64_MAX);
  auto queue = std::make_unique<TokenQueue>(TokenBackend{backend_, std::move(token)});
  std::vector<std::string> ran;  // the poller's until the handles are ready
  std::thread::id destroyed_on;
  TokenQueue::completion pending = queue->notify(&later, [&](int) { ran.push_back("pending"); });
  TokenQueue::completion destroys = queue->notify(&done, [&](int) {
    queue.reset();
    destroyed_on = std::this_thread::get_id();
    ran.push_back("destroys");
  });
  EXPECT_EQ(destroys.wait(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(queue, nullptr);
  EXPECT_NE(destroyed_on, std::this_thread::get_id()) << "destroyed on the poller thread";
  EXPECT_FALSE(pending.ready()) << "its work runs";
  later.complete_all();
  EXPECT_EQ(pending.wait(), HostCompletionBackend::kSuccess) << "the poller went on polling";
  while (!core_freed.load(std::memory_order_acquire)) std::this_thread::yield();
  EXPECT_EQ(ran, (std::vector<std::string>{"destroys", "pending"}));
  EXPECT_EQ(backend_.given_back(), 2u);
  EXPECT_EQ(pool_.stats().total().outstanding, 0);
}

TEST_F(CompletionQueueTest, ThePollerThreadFinishesRequestsAndWaitWakesUp) {
  HostWorkStream stream;
  Queue queue(backend_);
  std::atomic<int> calls{0};
  Completion completion = queue.notify(&stream, [&](int) { ++calls; });
  std::jthread completer([&] {
    std::this_thread::sleep_for(20ms);  // long enough for the waiter to sleep in the kernel
    stream.complete_all();
  });
  EXPECT_EQ(completion.wait(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_GT(queue.poller_cpu_time().count(), 0);
}

TEST_F(CompletionQueueTest, AnIdlePollerSleepsUntilARequestArrives) {
  HostWorkStream stream;
  Queue queue(backend_);
  stream.complete_through(1);
  queue.notify(&stream).wait();
  // Idle now: the poller sleeps in the kernel, making no pass, however long it is left alone. It
  // may still be finishing its last pass when a window begins (stalled after it finished the
  // request): some window of 50 ms is quiet, and in a poller that never sleeps none is.
  bool quiet = false;
  std::uint64_t sleeps = 0;
  for (int window = 0; window < 20 && !quiet; ++window) {
    const CompletionQueueStats before = queue.stats();
    std::this_thread::sleep_for(50ms);
    const CompletionQueueStats after = queue.stats();
    quiet = after.passes == before.passes;
    sleeps = after.sleeps;
  }
  EXPECT_TRUE(quiet) << "the idle poller made passes in each of 20 windows of 50 ms";
  EXPECT_GE(sleeps, 1u);
  // And a request wakes it.
  stream.complete_through(2);
  EXPECT_EQ(queue.notify(&stream).wait(), HostCompletionBackend::kSuccess);
}

TEST_F(CompletionQueueTest, APollerWaitingForLongWorkBacksOffToSleeps) {
  CompletionQueueOptions options;
  options.spin_for = 0ns;
  options.max_sleep = 2ms;
  HostWorkStream stream;
  Queue queue(backend_, options);
  Completion completion = queue.notify(&stream);
  const auto began = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(50ms);
  // A poller thread that the machine left without a core has slept less: wait for its sleeps.
  while (queue.stats().sleeps < 10 && std::chrono::steady_clock::now() - began < 10s)
    std::this_thread::sleep_for(1ms);
  const CompletionQueueStats waiting = queue.stats();
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
  EXPECT_GE(waiting.sleeps, 10u);
  // Sleeps of 1 us doubling to 2 ms: about a dozen to reach the cap, then at most one pass per
  // 2 ms (a stall only makes fewer).
  EXPECT_LE(waiting.passes, static_cast<std::uint64_t>(20 + waited_ms))
      << "in " << waited_ms << " ms: a poller that never slept would have made millions of passes";
  stream.complete_all();
  EXPECT_EQ(completion.wait(), HostCompletionBackend::kSuccess);
}

// The poller announces its sleep, then looks at the channels once more (poller_wait.h): a request
// pushed after its pass took the channels, and before it announced, must keep it awake. Here the
// request is pushed from inside the pass (a notify from the query), when the next backoff sleep
// would last max_sleep, 1 s: missed, it would wait that long. The hook and the request's callback
// both run on the poller thread, and read its count of sleeps: none may come between the two.
TEST_F(CompletionQueueTest, ARequestPushedDuringAPassKeepsThePollerFromItsBackoffSleep) {
  CompletionQueueOptions options;
  options.spin_for = 0ns;
  options.max_sleep = 1s;
  HostWorkStream never_done, always_done;
  always_done.complete_through(UINT64_MAX);
  std::atomic<bool> pushed{false};
  std::uint64_t sleeps_at_push = 0, sleeps_at_callback = 0;
  Completion pushed_in_pass;
  Queue *queue_in_hook = nullptr;
  backend_.on_query([&] {
    // 21 sleeps of 1 us doubling: the next one is capped at max_sleep.
    if (pushed.load() || queue_in_hook == nullptr || queue_in_hook->stats().sleeps < 21) return;
    sleeps_at_push = queue_in_hook->stats().sleeps;
    pushed_in_pass =
        queue_in_hook->notify(&always_done, [&](int) { sleeps_at_callback = queue_in_hook->stats().sleeps; });
    pushed.store(true);
  });
  Queue queue(backend_, options);
  queue_in_hook = &queue;
  Completion blocked = queue.notify(&never_done);
  while (!pushed.load()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(pushed_in_pass.wait(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(sleeps_at_callback, sleeps_at_push)
      << "the request waited out a backoff sleep: the poller did not look again before sleeping";
  never_done.complete_all();
  EXPECT_EQ(blocked.wait(), HostCompletionBackend::kSuccess);
}

// The same through the queue's shared channel, which a thread asks through once its caches were
// flushed at its exit (from a thread_local destructor that runs after the flush): a request pushed
// there during a pass must keep the poller from sleeping too. The request's callback, on the
// poller thread, reads the poller's count of sleeps: none may come between the push and the
// callback. Fails if the poller looks only at the threads' own channels before it sleeps.
TEST_F(CompletionQueueTest, ARequestPushedThroughTheSharedChannelDuringAPassKeepsThePollerAwake) {
  CompletionQueueOptions options;
  options.spin_for = 0ns;
  HostWorkStream never_done, always_done;
  always_done.complete_through(UINT64_MAX);
  struct AskAtExit {
    std::function<void()> ask;
    ~AskAtExit() {
      if (ask) ask();
    }
  };
  std::atomic<bool> pushed{false};
  std::uint64_t sleeps_at_push = 0, sleeps_at_callback = UINT64_MAX;  // the poller thread's
  Completion pushed_in_pass;
  Queue *queue_in_hook = nullptr;
  int queries = 0;  // the poller thread's
  backend_.on_query([&] {
    // The second query of `blocked` comes in the pass after the one that filed it: a pass that
    // makes no progress, after which the poller sleeps unless it finds the new request.
    if (++queries != 2) return;
    sleeps_at_push = queue_in_hook->stats().sleeps;
    std::thread([&] {
      thread_local AskAtExit at_exit;  // constructed before the flush at exit, so destroyed after it
      at_exit.ask = [&] {
        pushed_in_pass = queue_in_hook->notify(
            &always_done, [&](int) { sleeps_at_callback = queue_in_hook->stats().sleeps; });
      };
      pool_.Put(pool_.Get(0), 0);  // the thread's first cache: its flush at exit
    }).join();
    pushed.store(true);
  });
  Queue queue(backend_, options);
  queue_in_hook = &queue;
  Completion blocked = queue.notify(&never_done);
  while (!pushed.load()) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(pushed_in_pass.wait(), HostCompletionBackend::kSuccess);
  EXPECT_EQ(sleeps_at_callback, sleeps_at_push)
      << "the poller slept with a request in the shared channel: it did not look there before sleeping";
  never_done.complete_all();
  EXPECT_EQ(blocked.wait(), HostCompletionBackend::kSuccess);
}

TEST_F(CompletionQueueTest, RequestsOfAThreadThatExitedStillComplete) {
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  std::atomic<int> calls{0};
  std::thread([&] {
    for (int i = 0; i < 4; ++i) queue.notify(&stream, [&](int) { ++calls; });
  }).join();
  stream.complete_all();
  EXPECT_EQ(queue.poll(), 4u);
  EXPECT_EQ(calls.load(), 4);
  queue.poll();  // the channel of the exited thread is let go of here (LeakSanitizer checks)
}

TEST_F(CompletionQueueTest, OptionsOutOfRangeAreRefusedByValue) {
  const auto message_of = [&](CompletionQueueOptions options) -> std::string {
    try {
      Queue queue(backend_, options);
    } catch (const std::invalid_argument &error) {
      return error.what();
    }
    return "accepted";
  };
  CompletionQueueOptions options;
  options.spin_for = -5ns;
  EXPECT_NE(message_of(options).find("spin_for is -5 ns"), std::string::npos) << message_of(options);
  options = {};
  options.max_sleep = 0ns;
  EXPECT_NE(message_of(options).find("max_sleep is 0 ns"), std::string::npos) << message_of(options);
  options = {};
  options.polling = static_cast<CompletionPolling>(7);
  EXPECT_NE(message_of(options).find("polling is 7"), std::string::npos) << message_of(options);
}

TEST_F(CompletionQueueTest, AnEmptyOrUnfinishedHandleSaysSo) {
  Completion empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_FALSE(empty.ready());
  EXPECT_THROW(empty.wait(), std::logic_error);
  HostWorkStream stream;
  Queue queue(backend_, kPolledByTest);
  Completion pending = queue.notify(&stream);
  EXPECT_THROW(pending.status(), std::logic_error);
  EXPECT_THROW(pending.callback_exception(), std::logic_error);
  stream.complete_all();
  queue.poll();
  EXPECT_EQ(pending.status(), HostCompletionBackend::kSuccess);
}

}  // namespace
}  // namespace evpool
