// SpareBlockDepot (detail/spare_block_depot.h) on its own: a thread's spare blocks come back whole,
// in a bundle, to another thread's empty stack, whichever stripe they were given to; delete_all and
// the destructor delete every block held, in every stripe, and the depot stays usable. The depot
// under concurrency is in spare_block_depot_concurrency_test.cc.
#include "evpool/detail/spare_block_depot.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "evpool/detail/tagged_index_stack.h"
#include "support/counted_block.h"
#include "support/depot_stripes.h"

namespace evpool {
namespace {

using test::CountedBlock;
using test::CountedSpareBlocks;
using Depot = detail::SpareBlockDepot<CountedBlock, std::atomic, detail::TaggedIndexStack<std::atomic>, 8>;

// Gives a bundle of `count` new blocks from a new thread, one home stripe further along each time
// (after restart_depot_stripe_hints); returns the blocks.
std::vector<CountedBlock *> give_from_a_new_thread(Depot &depot, std::uint32_t count) {
  std::vector<CountedBlock *> blocks;
  std::thread([&] {
    CountedSpareBlocks spare;
    blocks = test::keep_new_blocks(spare, count);
    EXPECT_TRUE(depot.give(spare));
  }).join();
  return blocks;
}

TEST(SpareBlockDepot, AnEmptyDepotFillsNothing) {
  Depot depot;
  CountedSpareBlocks spare;
  EXPECT_FALSE(depot.take(spare));
  EXPECT_EQ(spare.count(), 0u);
}

TEST(SpareBlockDepot, BundlesComeBackWholeAndEmptyTheGiver) {
  const int live_before = CountedBlock::live();
  {
    Depot depot;
    CountedSpareBlocks first, second;
    const std::vector<CountedBlock *> two = test::keep_new_blocks(first, 2);
    const std::vector<CountedBlock *> sixteen = test::keep_new_blocks(second, CountedSpareBlocks::kCapacity);
    ASSERT_TRUE(depot.give(first));
    ASSERT_TRUE(depot.give(second));
    EXPECT_EQ(first.count(), 0u) << "the giver keeps nothing";
    EXPECT_EQ(second.count(), 0u);
    for (int i = 0; i < 2; ++i) {
      CountedSpareBlocks taker;
      ASSERT_TRUE(depot.take(taker));
      const std::vector<CountedBlock *> taken = test::take_every_block(taker);
      EXPECT_TRUE(taken == two || taken == sixteen) << "a bundle holds what one giver gave";
      for (CountedBlock *block : taken) delete block;
    }
    CountedSpareBlocks taker;
    EXPECT_FALSE(depot.take(taker)) << "both bundles were taken";
  }
  EXPECT_EQ(CountedBlock::live(), live_before);
}

// A taker scans every stripe, from the one where it last found a bundle: here the bundles sit in
// stripes 1, 2 and 3, and the taking thread's home is stripe 0. Fails if a take looks only at
// its hint's stripe.
TEST(SpareBlockDepot, ATakerFindsBundlesInEveryStripe) {
  const int live_before = CountedBlock::live();
  testing_support::restart_depot_stripe_hints();
  Depot depot;
  CountedSpareBlocks taker;
  ASSERT_FALSE(depot.take(taker));  // this thread's home: stripe 0
  std::vector<std::vector<CountedBlock *>> given;
  for (std::uint32_t count : {3u, 5u, 2u}) given.push_back(give_from_a_new_thread(depot, count));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(depot.take(taker)) << "bundle " << i << " of 3, in stripes 1 to 3, not found";
    const std::vector<CountedBlock *> taken = test::take_every_block(taker);
    EXPECT_TRUE(taken == given[0] || taken == given[1] || taken == given[2]);
    for (CountedBlock *block : taken) delete block;
  }
  EXPECT_FALSE(depot.take(taker));
  EXPECT_EQ(CountedBlock::live(), live_before);
}

// Fails if delete_all empties only some stripes (here bundles sit in stripes 0 to 3).
TEST(SpareBlockDepot, DeleteAllEmptiesEveryStripe) {
  const int live_before = CountedBlock::live();
  testing_support::restart_depot_stripe_hints();
  Depot depot;
  CountedSpareBlocks spare;
  test::keep_new_blocks(spare, 4);
  ASSERT_TRUE(depot.give(spare));  // stripe 0
  for (std::uint32_t count : {1u, 16u, 2u}) give_from_a_new_thread(depot, count);
  EXPECT_EQ(CountedBlock::live(), live_before + 23);
  depot.delete_all();
  EXPECT_EQ(CountedBlock::live(), live_before) << "a stripe kept its blocks";
  EXPECT_FALSE(depot.take(spare));
}

TEST(SpareBlockDepot, DeleteAllDeletesEveryBlockAndTheDepotStaysUsable) {
  const int live_before = CountedBlock::live();
  Depot depot;
  for (std::uint32_t count : {1u, 16u, 3u}) {
    CountedSpareBlocks spare;
    test::keep_new_blocks(spare, count);
    ASSERT_TRUE(depot.give(spare));
  }
  EXPECT_EQ(CountedBlock::live(), live_before + 20);
  depot.delete_all();
  EXPECT_EQ(CountedBlock::live(), live_before);
  CountedSpareBlocks spare;
  EXPECT_FALSE(depot.take(spare));
  depot.delete_all();  // an empty depot: nothing to do
  // The emptied nodes are reused: a bundle given now comes back.
  const std::vector<CountedBlock *> four = test::keep_new_blocks(spare, 4);
  ASSERT_TRUE(depot.give(spare));
  ASSERT_TRUE(depot.take(spare));
  EXPECT_EQ(test::take_every_block(spare), four);
  for (CountedBlock *block : four) delete block;
  EXPECT_EQ(CountedBlock::live(), live_before);
}

TEST(SpareBlockDepot, TheDestructorDeletesWhatItHolds) {
  const int live_before = CountedBlock::live();
  {
    Depot depot;
    for (std::uint32_t count : {7u, 1u}) {
      CountedSpareBlocks spare;
      test::keep_new_blocks(spare, count);
      ASSERT_TRUE(depot.give(spare));
    }
  }
  EXPECT_EQ(CountedBlock::live(), live_before);
}

}  // namespace
}  // namespace evpool
