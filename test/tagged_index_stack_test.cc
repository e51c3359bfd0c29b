#include "evpool/detail/tagged_index_stack.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "evpool/detail/node_arena.h"

namespace evpool::detail {
namespace {

struct TestNode {
  std::atomic<std::uint32_t> next{kNilIndex};
};
using Arena = NodeArena<TestNode, std::atomic>;
using Stack = TaggedIndexStack<std::atomic>;

std::vector<std::uint32_t> allocate_n(Arena &arena, int n) {
  std::vector<std::uint32_t> indices;
  for (int i = 0; i < n; ++i) indices.push_back(arena.allocate());
  return indices;
}

TEST(TaggedIndexStack, PopOfAnEmptyStackReturnsNil) {
  Arena arena;
  Stack stack;
  EXPECT_EQ(stack.pop(arena), kNilIndex);
  EXPECT_EQ(stack.pop_all(), kNilIndex);
}

TEST(TaggedIndexStack, PopsInLastInFirstOutOrder) {
  Arena arena;
  Stack stack;
  for (std::uint32_t index : allocate_n(arena, 5)) stack.push(index, arena);
  for (std::uint32_t expected = 5; expected-- > 0;) EXPECT_EQ(stack.pop(arena), expected);
  EXPECT_EQ(stack.pop(arena), kNilIndex);
}

TEST(TaggedIndexStack, PopAllDetachesTheWholeChainAndPushChainPutsItBack) {
  Arena arena;
  Stack stack;
  for (std::uint32_t index : allocate_n(arena, 4)) stack.push(index, arena);
  const std::uint32_t first = stack.pop_all();
  EXPECT_EQ(stack.pop(arena), kNilIndex);
  std::vector<std::uint32_t> chain;
  for (std::uint32_t i = first; i != kNilIndex; i = arena[i].next.load()) chain.push_back(i);
  EXPECT_EQ(chain, (std::vector<std::uint32_t>{3, 2, 1, 0}));

  Stack other;
  const std::uint32_t below = arena.allocate();
  other.push(below, arena);
  other.push_chain(chain.front(), chain.back(), arena);
  for (std::uint32_t expected : {3u, 2u, 1u, 0u, below}) EXPECT_EQ(other.pop(arena), expected);
  EXPECT_EQ(other.pop(arena), kNilIndex);
}

// Threads move nodes between two stacks; at the end every node is in exactly one of them.
TEST(TaggedIndexStack, ConcurrentPushAndPopNeitherLoseNorDuplicateNodes) {
  Arena arena;
  Stack stacks[2];
  constexpr int kNodes = 256;
  for (std::uint32_t index : allocate_n(arena, kNodes)) stacks[index % 2].push(index, arena);

  constexpr int kThreads = 8;
  constexpr int kMoves = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kMoves; ++i) {
        const int from = (t + i) % 2;
        const std::uint32_t index = stacks[from].pop(arena);
        if (index != kNilIndex) stacks[1 - from].push(index, arena);
      }
    });
  for (auto &thread : threads) thread.join();

  std::vector<int> seen(kNodes, 0);
  for (Stack &stack : stacks)
    for (std::uint32_t index; (index = stack.pop(arena)) != kNilIndex;) ++seen[index];
  for (int index = 0; index < kNodes; ++index) EXPECT_EQ(seen[index], 1) << "node " << index;
}

}  // namespace
}  // namespace evpool::detail
