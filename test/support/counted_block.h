// evpool test support: a stand-in for a shared lease's control block in SpareBlockDepot's tests,
// which counts the blocks alive (so that a test sees every block deleted once) and marks the
// threads that hold it (so that a stress test sees a block held twice).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "evpool/detail/shared_lease_block.h"

namespace evpool::test {

struct CountedBlock {
  CountedBlock() noexcept { live_blocks().fetch_add(1, std::memory_order_relaxed); }
  CountedBlock(const CountedBlock &) = delete;
  CountedBlock &operator=(const CountedBlock &) = delete;
  ~CountedBlock() { live_blocks().fetch_sub(1, std::memory_order_relaxed); }

  /// Blocks constructed and not yet deleted, in the whole process.
  static int live() noexcept { return live_blocks().load(std::memory_order_relaxed); }

  std::atomic<int> holders{0};  // a stress test's marker: threads holding the block

 private:
  static std::atomic<int> &live_blocks() noexcept {
    static std::atomic<int> count{0};
    return count;
  }
};

using CountedSpareBlocks = detail::SpareBlocks<CountedBlock>;

/// Keeps `count` new blocks in `spare` (which has room for them); returns them, in the order kept.
inline std::vector<CountedBlock *> keep_new_blocks(CountedSpareBlocks &spare, std::uint32_t count) {
  std::vector<CountedBlock *> kept;
  for (std::uint32_t i = 0; i < count; ++i) {
    kept.push_back(new CountedBlock);
    spare.keep(kept.back());
  }
  return kept;
}

/// Takes every block out of `spare`, in the order kept.
inline std::vector<CountedBlock *> take_every_block(CountedSpareBlocks &spare) {
  std::vector<CountedBlock *> taken;
  while (CountedBlock *block = spare.take()) taken.insert(taken.begin(), block);
  return taken;
}

}  // namespace evpool::test
