// evpool test support: a stand-in for a shared lease's control block in SpareBlockDepot's tests,
// which counts the blocks alive (so that a test sees every block deleted once) and marks the
// thread that holds it (so that a stress test sees a block held twice).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace evpool::test {

struct CountedBlock {
  CountedBlock() noexcept { live_blocks().fetch_add(1, std::memory_order_relaxed); }
  CountedBlock(const CountedBlock &) = delete;
  CountedBlock &operator=(const CountedBlock &) = delete;
  ~CountedBlock() { live_blocks().fetch_sub(1, std::memory_order_relaxed); }

  /// Blocks constructed and not yet deleted, in the whole process.
  static int live() noexcept { return live_blocks().load(std::memory_order_relaxed); }

  CountedBlock *next_spare = nullptr;  // what SpareBlockDepot links a chain through
  std::atomic<int> holders{0};         // a stress test's marker: threads holding the block

 private:
  static std::atomic<int> &live_blocks() noexcept {
    static std::atomic<int> count{0};
    return count;
  }
};

/// `size` >= 1 new blocks linked through next_spare, first to last.
inline std::vector<CountedBlock *> make_chain(std::uint32_t size) {
  std::vector<CountedBlock *> blocks;
  for (std::uint32_t i = 0; i < size; ++i) blocks.push_back(new CountedBlock);
  for (std::uint32_t i = 0; i + 1 < size; ++i) blocks[i]->next_spare = blocks[i + 1];
  return blocks;
}

/// The blocks of the chain that begins at `first`, in order.
inline std::vector<CountedBlock *> chain_of(CountedBlock *first) {
  std::vector<CountedBlock *> blocks;
  for (CountedBlock *block = first; block != nullptr; block = block->next_spare) blocks.push_back(block);
  return blocks;
}

inline void delete_chain(CountedBlock *first) {
  while (first != nullptr) {
    CountedBlock *next = first->next_spare;
    delete first;
    first = next;
  }
}

}  // namespace evpool::test
