// StreamPoolOnGpu.PurgeRacingGetsAndPutsLosesNothing (cuda_stream_pool_test.cc) on the host seam:
// eight threads lease a stream, ask it, make it busy and hand it back through release() and Put,
// while the main thread purges two hundred times. On an H100 that test once ran past its step's
// limit; here a watchdog fails the test instead of hanging it, and says what every thread was
// doing and what the pool held. Runs under ThreadSanitizer in the full run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/pool_policy.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Token = HostStreamBackend::handle_type;

// What a worker is doing, for the watchdog's report.
enum Step : int { kLeasing, kAsking, kEnqueuing, kHandingBack, kStopped };
constexpr const char *kStepNames[] = {"leasing (Lease)", "asking", "enqueuing (make_busy)",
                                      "handing back (Put)", "stopped"};

struct Worker {
  std::atomic<int> step{kLeasing};
  std::atomic<std::uint64_t> rounds{0};
};

// Fails the test (and ends the process: a hung thread cannot be joined) if `done` is not called
// within the limit, after printing what `report` says.
class Watchdog {
 public:
  template <class Report>
  Watchdog(std::chrono::seconds limit, Report report)
      : thread_([this, limit, report = std::move(report)] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (done_cv_.wait_for(lock, limit, [this] { return done_; })) return;
          std::fprintf(stderr, "watchdog: no end after %lld s\n", static_cast<long long>(limit.count()));
          report();
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  ~Watchdog() { done(); }
  void done() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

template <class Policy>
struct PurgeRace {
  using Pool = BasicHandlePool<HostStreamBackend, Policy>;
  static constexpr int kThreads = 8;
  static constexpr int kPurges = 200;

  explicit PurgeRace(std::uint32_t work_queries) : work_queries(work_queries) {}

  void report() {
    std::fprintf(stderr, "main: purge %d of %d, %s\n", purges.load(), kPurges, main_step.load());
    for (int t = 0; t < kThreads; ++t)
      std::fprintf(stderr, "thread %d: %llu rounds, %s\n", t,
                   static_cast<unsigned long long>(workers[t].rounds.load()), kStepNames[workers[t].step.load()]);
    // Without the registry's lock (stats() takes it, and a hung Purge holds it).
    std::fprintf(stderr, "pool: busy set aside %llu, retired %llu, queries %llu\n",
                 static_cast<unsigned long long>(pool.busy_handles(0)),
                 static_cast<unsigned long long>(pool.retired_handles(0)),
                 static_cast<unsigned long long>(backend.queries()));
  }

  void run() {
    Watchdog watchdog(std::chrono::seconds(20), [this] { report(); });
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        Worker &me = workers[t];
        while (!stop.load(std::memory_order_relaxed)) {
          me.step.store(kLeasing, std::memory_order_relaxed);
          auto lease = pool.Lease(0);
          me.step.store(kAsking, std::memory_order_relaxed);
          if (!backend.asked_idle_since_busy(lease.get())) busy.fetch_add(1, std::memory_order_relaxed);
          (void)backend.has_pending_work(lease.get());  // the test's cudaStreamQuery
          me.step.store(kEnqueuing, std::memory_order_relaxed);
          backend.make_busy(lease.get(), work_queries);
          me.step.store(kHandingBack, std::memory_order_relaxed);
          pool.Put(lease.release());
          me.rounds.fetch_add(1, std::memory_order_relaxed);
        }
        me.step.store(kStopped, std::memory_order_relaxed);
      });
    for (int purge = 0; purge < kPurges; ++purge) {
      purges.store(purge);
      main_step.store("in Purge");
      pool.Purge();
      main_step.store("sleeping");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    main_step.store("joining");
    stop.store(true);
    for (std::thread &thread : threads) thread.join();
    main_step.store("in the last Purge");
    pool.Purge();
    main_step.store("in stats()");
    const DeviceStats figures = pool.stats().total();
    watchdog.done();
    std::uint64_t rounds = 0;
    for (const Worker &worker : workers) rounds += worker.rounds.load();
    std::printf("rounds %llu, created %llu, queries %llu\n", static_cast<unsigned long long>(rounds),
                static_cast<unsigned long long>(figures.created),
                static_cast<unsigned long long>(backend.queries()));
    EXPECT_EQ(busy.load(), 0u) << "handed out busy";
    EXPECT_EQ(figures.outstanding, 0);
    EXPECT_EQ(figures.idle + figures.retired + figures.busy, 0u) << "Purge destroyed every stream it kept";
    EXPECT_EQ(figures.created, figures.destroyed);
  }

  const std::uint32_t work_queries;
  HostStreamBackend backend{1};
  Pool pool{backend};
  Worker workers[kThreads];
  std::atomic<int> purges{0};
  std::atomic<const char *> main_step{"starting"};
  std::atomic<std::uint64_t> busy{0};
};

class PurgeRacingGetsAndPuts : public testing::TestWithParam<std::uint32_t> {};

TEST_P(PurgeRacingGetsAndPuts, EndsAndLosesNothing) { PurgeRace<StreamPoolPolicy>(GetParam()).run(); }

// How many queries (of any stream) a stream's work lasts.
INSTANTIATE_TEST_SUITE_P(WorkLengths, PurgeRacingGetsAndPuts, testing::Values(1u, 8u, 64u, 1024u, 100000u));

}  // namespace
}  // namespace evpool
