#include "evpool/detail/node_arena.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

namespace evpool::detail {
namespace {

struct TestNode {
  std::uint64_t payload = 0;
  std::atomic<std::uint32_t> next{kNilIndex};
};
using Arena = NodeArena<TestNode, std::atomic>;

TEST(NodeArena, HandsOutSequentialIndicesOfValueInitialisedNodes) {
  Arena arena;
  for (std::uint32_t expected = 0; expected < 1000; ++expected) {
    const std::uint32_t index = arena.allocate();
    EXPECT_EQ(index, expected);
    EXPECT_EQ(arena[index].payload, 0u);
    EXPECT_EQ(arena[index].next.load(), kNilIndex);
  }
  EXPECT_EQ(arena.allocated(), 1000u);
}

TEST(NodeArena, NodesAcrossChunkBoundariesAreDistinctAndKeepTheirValues) {
  Arena arena;
  constexpr std::uint32_t kCount = 64 + 128 + 256 + 1;  // into the fourth chunk
  std::set<const TestNode *> addresses;
  for (std::uint32_t i = 0; i < kCount; ++i) {
    const std::uint32_t index = arena.allocate();
    arena[index].payload = 1000 + index;
    addresses.insert(&arena[index]);
  }
  EXPECT_EQ(addresses.size(), kCount);
  for (std::uint32_t index = 0; index < kCount; ++index)
    EXPECT_EQ(arena[index].payload, 1000 + index) << "index " << index;
}

TEST(NodeArena, ConcurrentAllocationsGetDistinctNodes) {
  Arena arena;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  std::vector<std::vector<std::uint32_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint32_t index = arena.allocate();
        arena[index].payload = static_cast<std::uint64_t>(t) << 32 | static_cast<unsigned>(i);
        got[t].push_back(index);
      }
    });
  for (auto &thread : threads) thread.join();
  std::set<std::uint32_t> all;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) {
      all.insert(got[t][i]);
      EXPECT_EQ(arena[got[t][i]].payload, static_cast<std::uint64_t>(t) << 32 | static_cast<unsigned>(i));
    }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
  EXPECT_EQ(arena.allocated(), static_cast<std::uint32_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace evpool::detail
