// SpareBlockDepot under concurrency: threads hand chains of blocks to one depot (of one stripe,
// and of four) and take bundles back, in bundles of random sizes, while another thread deletes
// everything the depot holds from time to time (as Trim does). Checked: no block is held by two
// threads at once (each holder marks it), and none is lost or deleted twice (at the end, once the
// depot and every thread have deleted what they hold, no block is alive; a double delete is what
// ASan, which ./tools/test runs this suite under, reports). The memory orders that publish a
// bundle show under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "evpool/detail/spare_block_depot.h"
#include "evpool/detail/tagged_index_stack.h"
#include "support/counted_block.h"

namespace evpool {
namespace {

using test::CountedBlock;
using test::CountedSpareBlocks;
template <std::uint32_t Stripes>
using Depot = detail::SpareBlockDepot<CountedBlock, std::atomic, detail::TaggedIndexStack<std::atomic>, Stripes>;

class SpareBlockDepotConcurrency : public testing::TestWithParam<int> {};

template <std::uint32_t Stripes>
void expect_no_block_held_twice_or_lost(int threads) {
  constexpr int kRounds = 100000;
  constexpr std::uint32_t kMostHeld = 48;
  const int live_before = CountedBlock::live();
  std::atomic<int> held_twice{0};
  std::atomic<bool> done{false};
  {
    Depot<Stripes> depot;
    std::thread deleter([&] {
      while (!done.load(std::memory_order_relaxed)) {
        depot.delete_all();
        std::this_thread::yield();
      }
    });
    auto worker = [&](int t) {
      std::mt19937 random(static_cast<unsigned>(t * 17 + 3));
      std::vector<CountedBlock *> held;
      const auto hold = [&](CountedBlock *block) {
        if (block->holders.fetch_add(1, std::memory_order_relaxed) != 0) ++held_twice;
        held.push_back(block);
      };
      for (int round = 0; round < kRounds; ++round) {
        if (random() % 2 == 0) {
          CountedSpareBlocks spare;
          if (depot.take(spare))
            while (CountedBlock *block = spare.take()) hold(block);
          while (held.size() < kMostHeld / 2) hold(new CountedBlock);
        } else if (!held.empty()) {
          CountedSpareBlocks spare;
          const auto size = 1 + random() % std::min<std::size_t>(held.size(), CountedSpareBlocks::kCapacity);
          for (std::size_t i = 0; i < size; ++i) {
            held.back()->holders.fetch_sub(1, std::memory_order_relaxed);
            spare.keep(held.back());
            held.pop_back();
          }
          EXPECT_TRUE(depot.give(spare));  // fails only without memory
        }
        while (held.size() > kMostHeld) {
          held.back()->holders.fetch_sub(1, std::memory_order_relaxed);
          delete held.back();
          held.pop_back();
        }
      }
      for (CountedBlock *block : held) delete block;
    };
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back(worker, t);
    for (auto &thread : workers) thread.join();
    done.store(true, std::memory_order_relaxed);
    deleter.join();
  }
  EXPECT_EQ(held_twice.load(), 0) << "a block was held by two threads at once";
  EXPECT_EQ(CountedBlock::live(), live_before) << "blocks were lost (or deleted twice)";
}

// One stripe: every thread meets every other at one pair of heads.
TEST_P(SpareBlockDepotConcurrency, NoBlockIsHeldTwiceOrLostInOneStripe) {
  expect_no_block_held_twice_or_lost<1>(GetParam());
}

// Four stripes: threads give at their home stripes (two threads on one at 8 threads) and take
// wherever they find a bundle.
TEST_P(SpareBlockDepotConcurrency, NoBlockIsHeldTwiceOrLostInFourStripes) {
  expect_no_block_held_twice_or_lost<4>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Threads, SpareBlockDepotConcurrency, testing::Values(2, 4, 8),
                         [](const testing::TestParamInfo<int> &info) {
                           return std::to_string(info.param) + "Threads";
                         });

}  // namespace
}  // namespace evpool
