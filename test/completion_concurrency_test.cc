// BasicCompletionQueue under concurrency, through HostCompletionBackend: many threads asking
// while a completer finishes work at random and a poller (the queue's thread, or callers calling
// poll() at once) runs callbacks. Invariants checked at the end of each test:
// - every request's callback ran exactly once (a counter per request);
// - a thread's callbacks on one stream ran in the order of its requests;
// - every event went back to its pool (the pool has none outstanding), once per request;
// - the queue's counts agree;
// - no request was finished before its own work was done (the fixture, at every give-back).
// These run under ThreadSanitizer and ASan (LeakSanitizer: channels and requests freed).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
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
using namespace std::chrono_literals;

constexpr int kMaxInFlight = 8;

// What the callbacks record, checked once everything is done.
struct Ledger {
  explicit Ledger(std::size_t requests) : runs(requests) {}
  std::vector<std::atomic<int>> runs;  // per request id
  std::atomic<long> out_of_order{0};
  std::atomic<long> failed{0};
};

// Completes the work of `streams` at random points until stopped, then everything.
class Completer {
 public:
  explicit Completer(std::vector<HostWorkStream *> streams)
      : streams_(std::move(streams)), thread_([this](std::stop_token stop) { run(stop); }) {}
  ~Completer() {
    thread_.request_stop();
    thread_.join();
  }

 private:
  void run(std::stop_token stop) {
    std::mt19937_64 random(12345);
    while (!stop.stop_requested()) {
      HostWorkStream &stream = *streams_[random() % streams_.size()];
      const std::uint64_t done = stream.completed(), enqueued = stream.enqueued();
      if (enqueued > done) stream.complete_through(done + 1 + random() % (enqueued - done));
      if (random() % 64 == 0) std::this_thread::yield();
    }
    for (HostWorkStream *stream : streams_) stream->complete_all();
  }

  std::vector<HostWorkStream *> streams_;
  std::jthread thread_;
};

class CompletionConcurrency : public test::HostCompletionFixture<> {
 protected:
  void expect_all_done_once(const Ledger &ledger, const Queue &queue, std::size_t requests) {
    // The poller gives a request's event back, and counts it, after its callback ran: the
    // threads may have seen every callback while the last give-back is still to come.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((queue.stats().completions < requests || backend_.given_back() < requests) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::size_t wrong = 0;
    for (const auto &runs : ledger.runs) wrong += runs.load() != 1;
    EXPECT_EQ(wrong, 0u) << "requests whose callback did not run exactly once";
    EXPECT_EQ(ledger.out_of_order.load(), 0) << "callbacks of a thread's stream out of order";
    EXPECT_EQ(ledger.failed.load(), 0);
    EXPECT_EQ(backend_.given_back(), requests);
    EXPECT_EQ(pool_.stats().total().outstanding, 0);
    const CompletionQueueStats stats = queue.stats();
    EXPECT_EQ(stats.requests, requests);
    EXPECT_EQ(stats.completions, requests);
  }
};

// Each thread asks on two streams of its own, at most 8 requests in flight, while the
// completer finishes work at random and the queue's poller thread runs the callbacks.
TEST_F(CompletionConcurrency, ManyThreadsAskWhileWorkCompletesAtRandom) {
  constexpr int kThreads = 8, kStreamsEach = 2, kRequestsEach = 2000;
  std::vector<std::unique_ptr<HostWorkStream>> streams;
  std::vector<HostWorkStream *> all;
  for (int i = 0; i < kThreads * kStreamsEach; ++i) {
    streams.push_back(std::make_unique<HostWorkStream>(i % 2));
    all.push_back(streams.back().get());
  }
  Ledger ledger(kThreads * kRequestsEach);
  {
    Queue queue(backend_);
    {
      Completer completer(all);
      std::vector<std::jthread> threads;
      for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
          std::atomic<int> in_flight{0};
          std::vector<long> last(kStreamsEach, -1);  // the poller's: callbacks run one at a time
          std::mt19937 random(static_cast<unsigned>(t));
          for (int i = 0; i < kRequestsEach; ++i) {
            while (in_flight.load(std::memory_order_acquire) >= kMaxInFlight) std::this_thread::yield();
            const int s = static_cast<int>(random() % kStreamsEach);
            const long id = static_cast<long>(t) * kRequestsEach + i;
            in_flight.fetch_add(1, std::memory_order_relaxed);
            queue.notify(all[static_cast<std::size_t>(t * kStreamsEach + s)], [&, s, id](int status) {
              if (status != HostCompletionBackend::kSuccess) ledger.failed.fetch_add(1);
              if (last[static_cast<std::size_t>(s)] >= id) ledger.out_of_order.fetch_add(1);
              last[static_cast<std::size_t>(s)] = id;
              ledger.runs[static_cast<std::size_t>(id)].fetch_add(1);
              in_flight.fetch_sub(1, std::memory_order_release);
            });
          }
          while (in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
        });
    }
    expect_all_done_once(ledger, queue, kThreads * kRequestsEach);
  }
}

// Each thread hands its stream's handle to a new stream every few requests, as CUDA does when a
// stream destroyed with work running is followed by a cudaStreamCreate, and completes the old
// streams' work itself, a random part at a time, while the completer finishes the current
// streams' work. No request may be finished before its own work (the fixture's check), and each
// stream's callbacks run in the order of its requests.
TEST_F(CompletionConcurrency, ThreadsWhoseHandlesNameNewStreamsWhileTheOldOnesStillRun) {
  constexpr int kThreads = 4, kRequestsEach = 1500;
  std::vector<std::unique_ptr<HostWorkStream>> streams;
  std::vector<HostWorkStream *> all;
  for (int i = 0; i < kThreads; ++i) {
    streams.push_back(std::make_unique<HostWorkStream>(i % 2));
    all.push_back(streams.back().get());
  }
  Ledger ledger(kThreads * kRequestsEach);
  {
    Queue queue(backend_);
    {
      Completer completer(all);
      std::vector<std::jthread> threads;
      for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
          HostWorkStream &stream = *all[static_cast<std::size_t>(t)];
          std::atomic<int> in_flight{0};
          std::vector<long> last(kRequestsEach + 1, -1);  // per stream the handle named; the poller's
          std::vector<HostWork *> running;                // old streams' work, not all done yet
          std::mt19937 random(static_cast<unsigned>(t) + 100);
          const auto complete_some_old_work = [&] {
            if (running.empty()) return;
            const std::size_t pick = random() % running.size();
            HostWork &work = *running[pick];
            const std::uint64_t done = work.completed(), enqueued = work.enqueued();
            if (enqueued > done) work.complete_through(done + 1 + random() % (enqueued - done));
            if (work.completed() == work.enqueued()) {
              running[pick] = running.back();
              running.pop_back();
            }
          };
          int lifetime = 0;
          for (int i = 0; i < kRequestsEach; ++i) {
            while (in_flight.load(std::memory_order_acquire) >= kMaxInFlight) {
              complete_some_old_work();
              std::this_thread::yield();
            }
            if (random() % 16 == 0) {
              running.push_back(&stream.recreate());
              ++lifetime;
            }
            complete_some_old_work();
            const long id = static_cast<long>(t) * kRequestsEach + i;
            in_flight.fetch_add(1, std::memory_order_relaxed);
            queue.notify(&stream, [&, lifetime, id](int status) {
              if (status != HostCompletionBackend::kSuccess) ledger.failed.fetch_add(1);
              long &last_of_stream = last[static_cast<std::size_t>(lifetime)];
              if (last_of_stream >= id) ledger.out_of_order.fetch_add(1);
              last_of_stream = id;
              ledger.runs[static_cast<std::size_t>(id)].fetch_add(1);
              in_flight.fetch_sub(1, std::memory_order_release);
            });
          }
          while (in_flight.load(std::memory_order_acquire) != 0) {
            complete_some_old_work();
            std::this_thread::yield();
          }
        });
    }
    expect_all_done_once(ledger, queue, kThreads * kRequestsEach);
  }
}

// Threads share streams (no order is promised between them), two callers poll at once, and
// every fourth callback asks for one more completion.
TEST_F(CompletionConcurrency, CallersPollingAtOnceOverSharedStreamsWithCallbacksAskingForMore) {
  constexpr int kThreads = 4, kRequestsEach = 1500;
  HostWorkStream shared_a, shared_b(1);
  constexpr std::size_t kAskedByCallbacks = kThreads * kRequestsEach / 4;
  Ledger ledger(kThreads * kRequestsEach + kAskedByCallbacks);
  std::atomic<long> next_follow_up{kThreads * kRequestsEach};
  {
    Completer completer({&shared_a, &shared_b});  // outlives the queue: its destructor waits for work
    Queue queue(backend_, CompletionQueueOptions{CompletionPolling::kCaller});
    std::vector<std::jthread> pollers;
    for (int p = 0; p < 2; ++p)
      pollers.emplace_back([&](std::stop_token stop) {
        while (!stop.stop_requested()) queue.poll();
      });
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kRequestsEach; ++i) {
          const long id = static_cast<long>(t) * kRequestsEach + i;
          HostWorkStream *stream = i % 2 == 0 ? &shared_a : &shared_b;
          queue.notify(stream, [&, id, stream](int status) {
            if (status != HostCompletionBackend::kSuccess) ledger.failed.fetch_add(1);
            ledger.runs[static_cast<std::size_t>(id)].fetch_add(1);
            if (id % 4 == 0) {
              const long follow_up = next_follow_up.fetch_add(1);
              queue.notify(stream, [&, follow_up](int) {
                ledger.runs[static_cast<std::size_t>(follow_up)].fetch_add(1);
              });
            }
          });
          if (i % 64 == 0) std::this_thread::yield();
        }
      });
    for (auto &thread : threads) thread.join();
    // The destructor (after the pollers stop) finishes whatever is left.
    for (auto &poller : pollers) poller.request_stop();
    for (auto &poller : pollers) poller.join();
  }
  EXPECT_EQ(next_follow_up.load(), static_cast<long>(ledger.runs.size()));
  std::size_t wrong = 0;
  for (const auto &runs : ledger.runs) wrong += runs.load() != 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(ledger.failed.load(), 0);
  EXPECT_EQ(backend_.given_back(), ledger.runs.size());
  EXPECT_EQ(pool_.stats().total().outstanding, 0);
}

// Short-lived threads: each asks a few times and exits before its work completes. Their
// channels are let go of once drained (LeakSanitizer checks), and nothing is lost.
TEST_F(CompletionConcurrency, ThreadsThatAskAndExitBeforeTheirWorkCompletes) {
  constexpr int kRounds = 50, kThreadsPerRound = 4, kRequestsEach = 5;
  HostWorkStream stream;
  Ledger ledger(kRounds * kThreadsPerRound * kRequestsEach);
  {
    Queue queue(backend_);
    Completer completer({&stream});
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::jthread> threads;
      for (int t = 0; t < kThreadsPerRound; ++t)
        threads.emplace_back([&, round, t] {
          for (int i = 0; i < kRequestsEach; ++i) {
            const long id = (static_cast<long>(round) * kThreadsPerRound + t) * kRequestsEach + i;
            queue.notify(&stream, [&, id](int) { ledger.runs[static_cast<std::size_t>(id)].fetch_add(1); });
          }
        });
    }
    stream.complete_all();
  }
  std::size_t wrong = 0;
  for (const auto &runs : ledger.runs) wrong += runs.load() != 1;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(pool_.stats().total().outstanding, 0);
}

// Waiters on handles, each woken by the poller: no handle is left waiting, and each waiter sees
// what its callback wrote.
TEST_F(CompletionConcurrency, EveryWaiterWakesAndSeesItsCallbacksWrites) {
  constexpr int kThreads = 6, kRequestsEach = 300;
  std::vector<std::unique_ptr<HostWorkStream>> streams;
  std::vector<HostWorkStream *> all;
  for (int i = 0; i < kThreads; ++i) {
    streams.push_back(std::make_unique<HostWorkStream>());
    all.push_back(streams.back().get());
  }
  std::atomic<long> waited{0};
  {
    Queue queue(backend_);
    Completer completer(all);
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kRequestsEach; ++i) {
          int written_by_callback = 0;  // plain: wait() must order the callback's write before the read
          const int status = queue
                                 .notify(all[static_cast<std::size_t>(t)],
                                         [&written_by_callback, i](int) { written_by_callback = i + 1; })
                                 .wait();
          if (status == HostCompletionBackend::kSuccess && written_by_callback == i + 1) ++waited;
        }
      });
  }
  EXPECT_EQ(waited.load(), kThreads * kRequestsEach);
}

}  // namespace
}  // namespace evpool
