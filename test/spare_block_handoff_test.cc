// Shared leases begun on some threads and ended on others, so that their control blocks travel
// between threads through the pool's spare block depot (spare_block_depot.h), while other threads
// Trim, Purge and read stats, ending threads exit and new ones start (their hand-overs at exit),
// and, in the second case, the pool is destroyed while leases are still being ended.
// Checked: a lease keeps its event until its last copy is dropped (a block handed to two leases at
// once would change it), no event is held by two leases at once, and nothing is lost: once every
// lease is gone, created = destroyed. The memory orders of the hand-over show only under
// ThreadSanitizer, the blocks' lifetimes under ASan.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/deferred_work.h"
#include "evpool/host_backend.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

template <class Pool>
struct Handed {
  typename Pool::shared_lease lease;
  std::uint64_t serial;
};

// A queue of leases from the beginners to the enders.
template <class Pool>
class Queue {
  using Item = Handed<Pool>;

 public:
  void push(std::vector<Item> &&batch) {
    std::lock_guard lock(mutex_);
    for (auto &item : batch) items_.push_back(std::move(item));
  }
  bool pop(std::vector<Item> &out, std::size_t most) {
    std::lock_guard lock(mutex_);
    for (; most > 0 && !items_.empty(); --most) {
      out.push_back(std::move(items_.front()));
      items_.pop_front();
    }
    return !out.empty();
  }
  std::size_t size() {
    std::lock_guard lock(mutex_);
    return items_.size();
  }

 private:
  std::mutex mutex_;
  std::deque<Item> items_;
};

struct Board {
  explicit Board(std::size_t serials) : held(serials) {}
  std::vector<std::atomic<std::uint8_t>> held;  // by event serial: held by a live lease
  std::atomic<int> held_twice{0}, changed_under_lease{0};

  template <class Item>
  void begun(const Item &handed) {
    if (handed.serial >= held.size() || held[handed.serial].exchange(1) != 0) held_twice.fetch_add(1);
  }
  // Checks the lease and drops it; the flag clears before the event goes back to the pool.
  template <class Item>
  void end(Item &handed) {
    if (HostBackend::serial_of(handed.lease.get()) != handed.serial) changed_under_lease.fetch_add(1);
    if (handed.serial < held.size()) held[handed.serial].store(0);
    handed.lease.reset();
  }
};

// Over HostBackend, or HostStreamBackend (the core's stream paths; some leases end with their
// stream busy, and none may begin with a busy one).
template <class Backend>
void run(bool destroy_pool_while_ending) {
  using Pool = BasicHandlePool<Backend, DefaultPoolPolicy>;
  using Item = Handed<Pool>;
  constexpr bool kStreams = BusyHandleBackend<Backend>;
  constexpr int kBeginners = 2, kEnders = 2, kRounds = 4000;
  Backend backend(1);
  std::atomic<int> handed_busy{0};
  {
    auto pool = std::make_unique<Pool>(backend, Backend::kDefaultOptions, 64);
    Board board(1 << 20);
    Queue<Pool> queue;
    std::atomic<int> beginners_left{kBeginners};
    std::atomic<bool> stop_trimming{false};

    auto beginner = [&](int t) {
      std::mt19937 random(static_cast<unsigned>(t * 17 + 3));
      for (int round = 0; round < kRounds; ++round) {
        std::vector<Item> batch;
        const int burst = 1 + static_cast<int>(random() % 40);
        for (int i = 0; i < burst; ++i) {
          Item handed{pool->LeaseShared(0), 0};
          handed.serial = HostBackend::serial_of(handed.lease.get());
          board.begun(handed);
          if constexpr (kStreams) {
            if (!backend.asked_idle_since_busy(handed.lease.get())) handed_busy.fetch_add(1);
            if (random() % 2 == 0) backend.make_busy(handed.lease.get(), 1 + random() % 4);  // work enqueued
          }
          batch.push_back(std::move(handed));
        }
        // Some leases this thread ends itself, after the others are handed on.
        std::vector<Item> own;
        if (random() % 4 == 0) {
          own.push_back(std::move(batch.back()));
          batch.pop_back();
        }
        queue.push(std::move(batch));
        for (auto &handed : own) board.end(handed);
        while (queue.size() > 4000) std::this_thread::yield();
      }
      beginners_left.fetch_sub(1);
    };
    // An ender ends up to `budget` leases and exits: its spare blocks go over at exit.
    auto ender = [&](int budget) {
      std::vector<Item> got;
      while (budget > 0) {
        got.clear();
        if (!queue.pop(got, 64)) {
          if (beginners_left.load() == 0) return;
          std::this_thread::yield();
          continue;
        }
        for (auto &handed : got) board.end(handed);
        budget -= static_cast<int>(got.size());
      }
    };
    auto ender_chain = [&](int t) {
      std::mt19937 random(static_cast<unsigned>(t * 29 + 1));
      while (beginners_left.load() > 0 || queue.size() > 0)
        std::thread(ender, 20 + static_cast<int>(random() % 200)).join();
    };
    auto trimmer = [&] {
      for (int i = 0; !stop_trimming.load(); ++i) {
        switch (i % 4) {
          case 0: pool->Trim(0); break;
          case 1: pool->Purge(); break;
          case 2: pool->Trim(8); break;
          default: (void)pool->stats(); break;
        }
        std::this_thread::yield();
      }
    };

    std::vector<std::thread> threads;
    for (int t = 0; t < kBeginners; ++t) threads.emplace_back(beginner, t);
    for (int t = 0; t < kEnders; ++t) threads.emplace_back(ender_chain, t);
    std::thread trim_thread;
    if (!destroy_pool_while_ending) trim_thread = std::thread(trimmer);
    for (int t = 0; t < kBeginners; ++t) threads[t].join();
    if (destroy_pool_while_ending) pool.reset();  // enders are still ending leases
    for (std::size_t t = kBeginners; t < threads.size(); ++t) threads[t].join();
    stop_trimming = true;
    if (trim_thread.joinable()) trim_thread.join();
    EXPECT_EQ(board.held_twice.load(), 0) << "an event was held by two leases at once";
    EXPECT_EQ(board.changed_under_lease.load(), 0) << "a lease's event changed under it: its block was reused";
    EXPECT_EQ(handed_busy.load(), 0) << "a lease began with a stream whose work was pending";
    if (pool) pool->Purge();
  }
  run_deferred_work();  // a pool destroyed while leases were out ends through it
  EXPECT_EQ(backend.created(), backend.destroyed()) << "an event was lost";
}

TEST(SpareBlockHandoff, LeasesEndedOnExitingThreadsWhileTrimming) { run<HostBackend>(false); }
TEST(SpareBlockHandoff, LeasesEndedOnExitingThreadsAfterThePoolIsDestroyed) { run<HostBackend>(true); }
TEST(SpareBlockHandoff, StreamLeasesEndedOnExitingThreadsWhileTrimming) {
  run<test::HostStreamBackend>(false);
}
TEST(SpareBlockHandoff, StreamLeasesEndedOnExitingThreadsAfterThePoolIsDestroyed) {
  run<test::HostStreamBackend>(true);
}

}  // namespace
}  // namespace evpool
