// The bound on streams and the cap under concurrency, through HostStreamBackend on its tick
// clock (every Get of every thread ticks it): no stream is handed out busy, none is lost, and
// creation stays within what the work in flight, the caches and the threads in a Get at once can
// hold (docs/streams.md, "The bound"). Runs under ThreadSanitizer in the full run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/pool_cap.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

using test::HostStreamBackend;
using Stream = HostStreamBackend::owner_type;
using Clock = HostStreamBackend::Clock;

template <class Policy>
class StreamBoundConcurrency : public testing::Test {
 protected:
  using Pool = BasicHandlePool<HostStreamBackend, Policy>;
};
TYPED_TEST_SUITE(StreamBoundConcurrency, test::StreamPolicies, test::PolicyName);

// Each thread leases, makes its stream busy for `kWork` ticks and hands it back; a quarter of the
// hand-backs go through another thread (a lease ended elsewhere).
TYPED_TEST(StreamBoundConcurrency, ThreadsHandingBackBusyStayWithinTheBound) {
  constexpr int kThreads = 4, kGets = 3000;
  constexpr std::uint32_t kWork = 40;
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend);
  std::atomic<int> handed_out_busy{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<Stream>> passed(kThreads);  // from thread t to thread t + 1, under `gate`
  std::vector<std::atomic<bool>> gate(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Stream> outbox;
      for (int get = 0; get < kGets; ++get) {
        Stream stream = pool.Get(0);
        if (!backend.asked_idle_since_busy(stream.get())) ++handed_out_busy;
        backend.make_busy(stream.get(), kWork);
        if (get % 4 == 0)
          outbox.push_back(std::move(stream));
        else
          pool.Put(std::move(stream));
        backend.advance();
        // Hand the outbox over, and take back what the previous thread left, through a flag.
        auto &mine = gate[static_cast<std::size_t>(t)];
        if (outbox.size() == 8) {
          if (!mine.load(std::memory_order_acquire)) {
            passed[static_cast<std::size_t>(t)] = std::move(outbox);
            mine.store(true, std::memory_order_release);  // publishes the vector to the next thread
          } else {
            for (Stream &own : outbox) pool.Put(std::move(own));  // the next thread is behind
          }
          outbox.clear();
        }
        auto &theirs = gate[static_cast<std::size_t>((t + kThreads - 1) % kThreads)];
        if (theirs.load(std::memory_order_acquire)) {
          for (Stream &handed : passed[static_cast<std::size_t>((t + kThreads - 1) % kThreads)])
            pool.Put(std::move(handed));
          passed[static_cast<std::size_t>((t + kThreads - 1) % kThreads)].clear();
          theirs.store(false, std::memory_order_release);  // hands the vector back to its owner
        }
      }
      for (Stream &stream : outbox) pool.Put(std::move(stream));
    });
  }
  for (std::thread &thread : threads) thread.join();
  for (std::size_t t = 0; t < passed.size(); ++t)
    for (Stream &stream : passed[t]) pool.Put(std::move(stream));
  EXPECT_EQ(handed_out_busy.load(), 0);
  // Work in flight: each thread has at most kWork + 1 busy streams and 8 waiting to be passed on;
  // each cache holds its two magazines; each thread in a Get at once may create one more.
  const std::uint64_t bound =
      kThreads * (kWork + 1 + 2 * 8) + kThreads * test::kPerThreadCacheBound<TypeParam> + kThreads;
  EXPECT_LE(backend.created(), bound);
  const DeviceStats figures = pool.stats().total();
  EXPECT_EQ(figures.outstanding, 0) << "a stream was lost";
  EXPECT_EQ(figures.created - figures.destroyed, figures.idle + figures.busy + figures.retired);
}

// Under a cap, no more streams than the cap exist, and Gets at the cap wait for a busy stream.
TYPED_TEST(StreamBoundConcurrency, UnderACapNoMoreThanTheCapExistAndGetsWait) {
  constexpr int kThreads = 4, kGets = 1500;
  constexpr std::size_t kCap = 6;
  HostStreamBackend backend(1, Clock::kTicks);
  typename TestFixture::Pool pool(backend, HostStreamBackend::kDefaultOptions, kUnlimitedIdle,
                                  Checks::kDefault, kCap);
  std::atomic<int> handed_out_busy{0};
  std::atomic<bool> working{true};
  std::thread clock([&] {  // time passes while Gets wait at the cap
    while (working.load(std::memory_order_relaxed)) {
      backend.advance();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int get = 0; get < kGets; ++get) {
        auto lease = pool.Lease(0);
        if (!backend.asked_idle_since_busy(lease.get())) ++handed_out_busy;
        backend.make_busy(lease.get(), 20);
      }
    });
  }
  for (std::thread &thread : threads) thread.join();
  working.store(false);
  clock.join();
  EXPECT_EQ(handed_out_busy.load(), 0);
  EXPECT_LE(backend.created(), kCap);
  EXPECT_EQ(pool.stats().total().outstanding, 0);
}

}  // namespace
}  // namespace evpool
