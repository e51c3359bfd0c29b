// evpool: a shared lease's control block, and the stack of spare blocks a thread's cache keeps.
// Private to the library.
//
// Design rationale
// ----------------
// The copies of one SharedLease (shared_lease.h) share a control block: the event and
// their count. Allocating each block with `new` and freeing it with `delete` cost a shared lease
// more than the rest of it together (on the development machine 28 ns for the pair, against 12 ns
// for a whole unique lease), so blocks are recycled as events are: the thread that ends a shared
// lease keeps the block in its cache for that pool (ThreadCache::owner_spare_blocks), and the
// next shared lease that thread begins takes it back. A block is plain memory, so like an event it
// belongs to whichever thread ends the lease, never to the one that made it.
//
// A producer whose leases another thread ends (a completion thread, a stream callback) would then
// allocate every block, and the ending thread pile them up: so a cache keeps at most kCapacity
// spare blocks, and hands a full stack of them to its pool's depot (spare_block_depot.h), where a
// thread whose stack is empty takes a whole one back. What a cache keeps when the pool is
// destroyed leaves with the cache: its destructor deletes them, once both the thread and the pool
// have let go of it. A pool without caches (cache_capacity 0, or checked mode) allocates and
// deletes every block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace evpool::detail {

/// `Core` provides `atomic<T>` and `handle_type`.
template <class Core>
struct SharedLeaseBlock {
  /// The copies of the lease; read and written as shared_lease.h says.
  typename Core::template atomic<std::uint32_t> references{1};
  Core *core = nullptr;
  /// The lease's event, owned by the lease (not by the block), and its device. Raw, so that the
  /// thread that ends the lease hands the handle back without writing the block, and a spare
  /// block holds nothing to destroy.
  typename Core::handle_type handle{};
  int device = -1;
  /// The process's fork generation when the lease began (fork_guard.h).
  std::uint32_t fork_generation = 0;
};

/// A cache's spare blocks: a stack in an array, not a list linked through the blocks, so that
/// taking one reads no block. A block handed over from another thread is still in that thread's
/// processor cache; a linked list made each take wait for the transfer of the block before. Used
/// as the cache's magazines are: by its owner thread inside its owner section, or by a purger that
/// holds the cache; the destructor (which deletes the blocks) runs when no one else can reach it.
template <class Block>
class SpareBlocks {
 public:
  static constexpr std::uint32_t kCapacity = 16;

  SpareBlocks() noexcept = default;
  SpareBlocks(const SpareBlocks &) = delete;
  SpareBlocks &operator=(const SpareBlocks &) = delete;
  ~SpareBlocks() {
    while (Block *block = take()) delete block;
  }

  /// A spare block, or nullptr if there is none.
  Block *take() noexcept { return count_ == 0 ? nullptr : blocks_[--count_]; }
  /// Keeps `block` (whose lease has ended); false if the stack is full (the caller deals with it).
  bool keep(Block *block) noexcept {
    if (count_ == kCapacity) return false;
    blocks_[count_++] = block;
    return true;
  }
  std::uint32_t count() const noexcept { return count_; }

  /// Moves every block into `out`, which has room for kCapacity; returns how many.
  std::uint32_t give_all(Block **out) noexcept {
    std::copy_n(blocks_, count_, out);
    return std::exchange(count_, 0);
  }
  /// Takes the `count` <= kCapacity blocks of `in`; the stack must be empty.
  void take_all(Block *const *in, std::uint32_t count) noexcept {
    std::copy_n(in, count, blocks_);
    count_ = count;
  }

 private:
  std::uint32_t count_ = 0;
  Block *blocks_[kCapacity];
};

}  // namespace evpool::detail
