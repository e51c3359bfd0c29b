// The registry of thread caches must be walkable by a fork() child at every instant of a change:
// fork() may land between any two stores of another thread. SnapshottingAtomic drives the
// registry with a hook around every store, and the hook walks the list there, as a child would.
#include "evpool/detail/cache_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <set>
#include <string>

namespace evpool::detail {
namespace {

// Runs between the stores of the change under test; empty outside it.
std::function<void()> fork_here;

template <class T>
class SnapshottingAtomic {
 public:
  constexpr SnapshottingAtomic(T value) noexcept : value_(value) {}  // NOLINT: as std::atomic
  T load(std::memory_order order) const noexcept { return value_.load(order); }
  void store(T value, std::memory_order order) noexcept {
    if (fork_here) fork_here();
    value_.store(value, order);
    if (fork_here) fork_here();
  }

 private:
  std::atomic<T> value_;
};

struct Node {
  int id = 0;
  bool freed = false;
  SnapshottingAtomic<Node *> next{nullptr};
  SnapshottingAtomic<Node *> &registry_next() noexcept { return next; }
};
using Registry = CacheRegistry<Node, SnapshottingAtomic>;

// What a fork child would find: the ids it reaches, or "cycle" and "freed" findings.
struct Walk {
  std::set<int> ids;
  std::string trouble;
};
Walk walk(Registry &registry, int bound) {
  Walk result;
  int steps = 0;
  registry.for_each([&](Node &node) {
    if (++steps > bound) result.trouble = "the walk does not end";
    if (node.freed) result.trouble += " node " + std::to_string(node.id) + " is freed";
    result.ids.insert(node.id);
  });
  return result;
}

TEST(CacheRegistry, AChildForkedDuringAnAddMeetsEveryEarlierCache) {
  Node nodes[4];
  Registry registry;
  for (int i = 0; i < 3; ++i) nodes[i].id = i, registry.add(nodes[i]);
  nodes[3].id = 3;
  int snapshots = 0;
  fork_here = [&] {
    ++snapshots;
    const Walk child = walk(registry, 4);
    EXPECT_EQ(child.trouble, "");
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(child.ids.count(i), 1u) << "snapshot " << snapshots << " lost cache " << i;
  };
  registry.add(nodes[3]);
  fork_here = nullptr;
  EXPECT_EQ(snapshots, 4) << "two stores, a snapshot before and after each";
  EXPECT_EQ(walk(registry, 4).ids, (std::set<int>{0, 1, 2, 3}));
}

TEST(CacheRegistry, AChildForkedDuringASweepNeverMeetsAFreedCacheAndMeetsEveryKeptOne) {
  Node nodes[5];
  Registry registry;
  for (int i = 0; i < 5; ++i) nodes[i].id = i, registry.add(nodes[i]);
  int snapshots = 0;
  fork_here = [&] {
    ++snapshots;
    const Walk child = walk(registry, 5);
    EXPECT_EQ(child.trouble, "") << "snapshot " << snapshots;
    for (int kept : {0, 2, 4})
      EXPECT_EQ(child.ids.count(kept), 1u) << "snapshot " << snapshots << " lost cache " << kept;
  };
  registry.sweep([](Node &node) { return node.id % 2 == 1; }, [](Node &node) { node.freed = true; });
  fork_here = nullptr;
  EXPECT_EQ(snapshots, 4) << "two unlinks, a snapshot before and after each";
  EXPECT_EQ(walk(registry, 5).ids, (std::set<int>{0, 2, 4}));
}

}  // namespace
}  // namespace evpool::detail
