// SpareBlockDepot (detail/spare_block_depot.h) on its own: a thread's spare blocks come back whole,
// in a bundle, to another thread's empty stack, whichever stripe they were given to; delete_all and
// the destructor delete every block held, in every stripe, and the depot stays usable. The depot
// under concurrency is in spare_block_depot_concurrency_test.cc.
#include "evpool/detail/spare_block_depot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "evpool/detail/tagged_index_stack.h"
#include "support/counted_block.h"
#include "support/depot_stripes.h"
#include "support/recorded_stack.h"

namespace evpool {
namespace {

using test::CountedBlock;
using test::CountedSpareBlocks;
using Depot = detail::SpareBlockDepot<CountedBlock, std::atomic, detail::TaggedIndexStack<std::atomic>, 8>;

// A depot whose stacks count their calls: stripe s's bundles are stack 2s, its empty nodes 2s + 1.
using RecordedDepot = detail::SpareBlockDepot<CountedBlock, std::atomic, test::RecordedStack, 8>;
constexpr std::size_t bundles_of(std::uint32_t stripe) { return 2 * stripe; }
constexpr std::size_t empty_nodes_of(std::uint32_t stripe) { return 2 * stripe + 1; }

// Gives a bundle of `count` new blocks from a new thread, one home stripe further along each time
// (after restart_depot_stripe_hints); returns the blocks.
template <class AnyDepot>
std::vector<CountedBlock *> give_from_a_new_thread(AnyDepot &depot, std::uint32_t count) {
  std::vector<CountedBlock *> blocks;
  std::thread([&] {
    CountedSpareBlocks spare;
    blocks = test::keep_new_blocks(spare, count);
    EXPECT_TRUE(depot.give(spare));
  }).join();
  return blocks;
}

// Takes a bundle, which must hold exactly the blocks of one of `given` (a bundle holds what one
// giver gave), and deletes them.
void take_one_of(Depot &depot, const std::vector<std::vector<CountedBlock *>> &given) {
  CountedSpareBlocks taker;
  ASSERT_TRUE(depot.take(taker)) << "no bundle found";
  const std::vector<CountedBlock *> taken = test::take_every_block(taker);
  EXPECT_TRUE(std::find(given.begin(), given.end(), taken) != given.end()) << "a bundle holds what one giver gave";
  for (CountedBlock *block : taken) delete block;
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
    for (int i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(take_one_of(depot, {two, sixteen}));
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
    SCOPED_TRACE(testing::Message() << "bundle " << i << " of 3, in stripes 1 to 3");
    ASSERT_NO_FATAL_FAILURE(take_one_of(depot, given));
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

// Which stripe each call reaches (spare_block_depot.h, "Stripes"). Fails if gives all go to one
// stripe.
TEST(SpareBlockDepotStripes, AGiveGoesToTheGiversHomeStripe) {
  testing_support::restart_depot_stripe_hints();
  test::restart_stack_numbering();
  RecordedDepot depot;
  CountedSpareBlocks spare;
  test::keep_new_blocks(spare, 2);
  ASSERT_TRUE(depot.give(spare));                                // this thread's home: stripe 0
  for (int i = 0; i < 3; ++i) give_from_a_new_thread(depot, 1);  // homes 1, 2, 3
  for (std::uint32_t stripe = 0; stripe < 8; ++stripe)
    EXPECT_EQ(test::stack_calls(bundles_of(stripe)).pushes.load(), stripe < 4 ? 1 : 0) << "stripe " << stripe;
  depot.delete_all();
}

// The scan goes on past the last stripe to the first: a taker at home 5 finds the bundle in
// stripe 0 after looking at 5, 6 and 7. Fails if the scan does not wrap around.
TEST(SpareBlockDepotStripes, ATakeWrapsAroundPastTheLastStripe) {
  testing_support::restart_depot_stripe_hints();
  test::restart_stack_numbering();
  RecordedDepot depot;
  CountedSpareBlocks spare;
  const std::vector<CountedBlock *> given = test::keep_new_blocks(spare, 3);
  ASSERT_TRUE(depot.give(spare));                                                        // stripe 0
  for (int i = 0; i < 4; ++i) std::thread([] { detail::depot_stripe_hints(); }).join();  // homes 1 to 4
  std::vector<CountedBlock *> taken;
  std::thread([&] {  // home 5
    CountedSpareBlocks taker;
    EXPECT_TRUE(depot.take(taker)) << "the bundle in stripe 0 was not found from stripe 5";
    taken = test::take_every_block(taker);
  })
      .join();
  EXPECT_EQ(taken, given);
  for (std::uint32_t stripe : {5u, 6u, 7u, 0u})
    EXPECT_EQ(test::stack_calls(bundles_of(stripe)).pops.load(), 1) << "stripe " << stripe << " looked at once";
  for (CountedBlock *block : taken) delete block;
}

// A taker looks first where it last found a bundle: having found one in stripe 1, this thread
// (home 0) next takes the bundle in stripe 2 before its own in stripe 0. Fails if the hint is not
// kept (the thread would take its own bundle first).
TEST(SpareBlockDepotStripes, ATakeLooksFirstWhereItLastFoundABundle) {
  testing_support::restart_depot_stripe_hints();
  test::restart_stack_numbering();
  RecordedDepot depot;
  CountedSpareBlocks spare;
  ASSERT_FALSE(depot.take(spare));                                             // this thread's home: stripe 0
  const std::vector<CountedBlock *> first = give_from_a_new_thread(depot, 1);  // stripe 1
  const std::vector<CountedBlock *> second = give_from_a_new_thread(depot, 2);  // stripe 2
  ASSERT_TRUE(depot.take(spare));
  EXPECT_EQ(test::take_every_block(spare), first);
  test::keep_new_blocks(spare, 3);
  ASSERT_TRUE(depot.give(spare));  // stripe 0
  ASSERT_TRUE(depot.take(spare));
  EXPECT_EQ(test::take_every_block(spare), second) << "the take did not start where the last one found a bundle";
  for (CountedBlock *block : first) delete block;
  for (CountedBlock *block : second) delete block;
  depot.delete_all();
}

// delete_all leaves each stripe's nodes in that stripe, where its givers look for them. Fails if
// it gathers them elsewhere.
TEST(SpareBlockDepotStripes, DeleteAllLeavesTheNodesInTheirStripes) {
  testing_support::restart_depot_stripe_hints();
  test::restart_stack_numbering();
  RecordedDepot depot;
  CountedSpareBlocks spare;
  ASSERT_FALSE(depot.take(spare));   // this thread's home: stripe 0
  give_from_a_new_thread(depot, 4);  // stripe 1
  depot.delete_all();
  EXPECT_EQ(test::stack_calls(empty_nodes_of(1)).pushes.load(), 1);
  EXPECT_EQ(test::stack_calls(empty_nodes_of(0)).pushes.load(), 0);
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
