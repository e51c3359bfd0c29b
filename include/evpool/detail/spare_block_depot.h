// evpool: a pool's depot of spare shared-lease blocks, handed between threads in bundles. Private to
// the library.
//
// Design rationale
// ----------------
// A thread keeps the control blocks of the shared leases it ends (shared_lease_block.h), up to
// SpareBlocks::kCapacity, and its next shared leases take them back. That serves a thread that
// begins and ends its own leases. A scheduler's leases mostly end elsewhere: a completion thread
// drops the last copy of what the submitting thread began. Then the submitter finds no spare block
// and allocates every one, and the completion thread deletes every one past its kCapacity: a
// malloc and a cross-thread free per lease, which cost more than all the rest of it (measured in
// docs/benchmarks.md, "lease-handoff").
//
// So blocks travel as magazines of events do, in whole stacks: a thread whose spare stack is full
// when it ends one more lease hands the full stack over to the pool's depot (one compare-exchange
// for kCapacity blocks) and keeps the new block; a thread that finds its stack empty when it begins
// a lease takes a whole bundle back. An exiting thread hands over what it kept. A thread that both
// begins and ends its leases never reaches the depot: its stack absorbs the difference.
//
// A bundle is a node of the depot's own arena (node_arena.h) that holds the top of a chain of
// blocks, linked through their `next_spare`, and the chain's length:
//
//   | next (u32) | count (u32) | first (Block *) | padding to 128 bytes |
//
// The nodes sit on two tagged stacks (tagged_index_stack.h): `bundles` holds those with blocks,
// `empty` the nodes free for the next hand-over. They are index stacks for the same reason as the
// event depot's: a node is reused as soon as it is popped, so a pointer stack would need its own
// ABA defence. `count` and `first` are plain: only a bundle's holder touches them, and the stacks'
// release and acquire publish them, with the blocks behind them, to the next holder.
//
// Memory: blocks are created only when a beginning thread finds none in its stack and none in the
// depot, so a pool never has more than its peak of shared leases alive at once plus what the
// threads' stacks keep (kCapacity each). Trim and Purge delete the depot's blocks; the threads'
// stacks keep theirs until the thread or the pool goes.
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/node_arena.h"

namespace evpool::detail {

/// `Block` is a SharedLeaseBlock; `Stack` a TaggedIndexStack over `Atomic`. give and take are
/// thread-safe and lock-free (give allocates a node when none is spare); delete_all too, but it
/// deletes blocks (operator delete). The destructor runs when no thread can reach the depot.
template <class Block, template <class> class Atomic, class Stack>
class SpareBlockDepot {
 public:
  SpareBlockDepot() = default;
  SpareBlockDepot(const SpareBlockDepot &) = delete;
  SpareBlockDepot &operator=(const SpareBlockDepot &) = delete;
  ~SpareBlockDepot() { delete_all(); }

  /// Takes over the chain of `count` >= 1 blocks that begins at `first` (linked through
  /// `next_spare`, the last one's nullptr). False if no node could be had (no memory): then
  /// nothing changed and the caller still owns them.
  bool give(Block *first, std::uint32_t count) noexcept {
    std::uint32_t index = empty_.value.pop(arena_);
    if (index == kNilIndex) {
      try {
        index = arena_.allocate();
      } catch (...) {
        return false;
      }
    }
    Bundle &bundle = arena_[index];
    bundle.first = first;
    bundle.count = count;
    bundles_.value.push(index, arena_);  // publishes the bundle and its blocks (release)
    return true;
  }

  /// The chain of a bundle of blocks, its length in `count`; nullptr if the depot holds none.
  Block *take(std::uint32_t &count) noexcept {
    const std::uint32_t index = bundles_.value.pop(arena_);  // sees the giver's writes (acquire)
    if (index == kNilIndex) return nullptr;
    Bundle &bundle = arena_[index];
    Block *first = bundle.first;
    count = bundle.count;
    bundle.first = nullptr;
    empty_.value.push(index, arena_);
    return first;
  }

  /// Deletes every block the depot holds; gives made meanwhile may stay.
  void delete_all() noexcept {
    std::uint32_t index = bundles_.value.pop_all();  // the chain is ours alone (acquire)
    if (index == kNilIndex) return;
    const std::uint32_t first = index;
    for (std::uint32_t last = index;; last = index) {
      Bundle &bundle = arena_[index];
      for (Block *block = bundle.first; block != nullptr;) delete std::exchange(block, block->next_spare);
      bundle.first = nullptr;
      index = bundle.next.load(std::memory_order_relaxed);
      if (index == kNilIndex) return empty_.value.push_chain(first, last, arena_);
    }
  }

 private:
  struct alignas(kFalseSharingRange) Bundle {
    Atomic<std::uint32_t> next{kNilIndex};
    std::uint32_t count = 0;
    Block *first = nullptr;
  };
  static_assert(sizeof(Bundle) == kFalseSharingRange, "a bundle is alone on its lines: givers and takers of "
                                                      "neighbouring bundles share nothing");

  NodeArena<Bundle, Atomic> arena_;
  CacheLinePadded<Stack> bundles_;
  CacheLinePadded<Stack> empty_;
};

}  // namespace evpool::detail
