// SpareBlockDepot (detail/spare_block_depot.h) on its own: bundles come back whole, with their
// counts; delete_all and the destructor delete every block held, and the depot stays usable. The
// depot under concurrency is in spare_block_depot_concurrency_test.cc.
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
using Depot = detail::SpareBlockDepot<CountedBlock, std::atomic, detail::TaggedIndexStack<std::atomic>>;

TEST(SpareBlockDepot, AnEmptyDepotHasNoBundle) {
  Depot depot;
  std::uint32_t count = 99;
  EXPECT_EQ(depot.take(count), nullptr);
  EXPECT_EQ(count, 99u) << "nothing taken, nothing counted";
}

TEST(SpareBlockDepot, BundlesComeBackWholeWithTheirCounts) {
  const int live_before = CountedBlock::live();
  {
    Depot depot;
    std::vector<CountedBlock *> two = test::make_chain(2), five = test::make_chain(5);
    ASSERT_TRUE(depot.give(two.front(), 2));
    ASSERT_TRUE(depot.give(five.front(), 5));
    for (int i = 0; i < 2; ++i) {
      std::uint32_t count = 0;
      CountedBlock *first = depot.take(count);
      ASSERT_NE(first, nullptr);
      const std::vector<CountedBlock *> &given = first == two.front() ? two : five;
      EXPECT_EQ(count, given.size());
      EXPECT_EQ(test::chain_of(first), given) << "the chain comes back as it was given";
      test::delete_chain(first);
    }
    std::uint32_t count = 0;
    EXPECT_EQ(depot.take(count), nullptr) << "both bundles were taken";
  }
  EXPECT_EQ(CountedBlock::live(), live_before);
}

TEST(SpareBlockDepot, DeleteAllDeletesEveryBlockAndTheDepotStaysUsable) {
  const int live_before = CountedBlock::live();
  Depot depot;
  for (std::uint32_t size : {1u, 16u, 3u}) ASSERT_TRUE(depot.give(test::make_chain(size).front(), size));
  EXPECT_EQ(CountedBlock::live(), live_before + 20);
  depot.delete_all();
  EXPECT_EQ(CountedBlock::live(), live_before);
  std::uint32_t count = 0;
  EXPECT_EQ(depot.take(count), nullptr);
  depot.delete_all();  // an empty depot: nothing to do
  // The emptied nodes are reused: a bundle given now comes back.
  std::vector<CountedBlock *> chain = test::make_chain(4);
  ASSERT_TRUE(depot.give(chain.front(), 4));
  CountedBlock *first = depot.take(count);
  EXPECT_EQ(first, chain.front());
  EXPECT_EQ(count, 4u);
  test::delete_chain(first);
  EXPECT_EQ(CountedBlock::live(), live_before);
}

TEST(SpareBlockDepot, TheDestructorDeletesWhatItHolds) {
  const int live_before = CountedBlock::live();
  {
    Depot depot;
    ASSERT_TRUE(depot.give(test::make_chain(7).front(), 7));
    ASSERT_TRUE(depot.give(test::make_chain(1).front(), 1));
  }
  EXPECT_EQ(CountedBlock::live(), live_before);
}

}  // namespace
}  // namespace evpool
