// SpareBlockDepot (detail/spare_block_depot.h) on its own: a thread's spare blocks come back whole,
// in a bundle, to another thread's empty stack; delete_all and the destructor delete every block
// held, and the depot stays usable. The depot under concurrency is in
// spare_block_depot_concurrency_test.cc.
#include "evpool/detail/spare_block_depot.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "evpool/detail/tagged_index_stack.h"
#include "support/counted_block.h"

namespace evpool {
namespace {

using test::CountedBlock;
using test::CountedSpareBlocks;
using Depot = detail::SpareBlockDepot<CountedBlock, std::atomic, detail::TaggedIndexStack<std::atomic>>;

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
