// evpool: a chunked arena of nodes addressed by 24-bit indices. Private to the library.
//
// Design rationale
// ----------------
// The lock-free stacks link nodes by index instead of by pointer, so that a stack head can hold a
// 24-bit index and a 40-bit ABA tag in one 64-bit word (see tagged_index_stack.h for why the tag
// gets the bits). This arena turns an index back into a node. 24 bits name 2^24 - 64 nodes: one
// node holds an idle event (or a magazine of them), so that is millions of idle events, beyond
// what a CUDA context creates; a pool that would need more gets std::length_error, not a wrap.
//
// Nodes are never returned to the allocator while the arena lives. That is what makes the stacks
// safe without hazard pointers: a popper that loaded `head` may read `next` of a node that another
// thread popped and reused a moment ago; the read lands in live memory (and `next` is atomic, so
// it is not a data race), and the popper's compare-exchange then fails on the tag.
//
// Chunk layout: chunk k holds kFirstChunkSize << k nodes, so the chunks double in size and
// kMaxChunks = 18 of them cover every index below kNilIndex:
//
//   chunk 0: indices [0, 64)      chunk 1: [64, 192)      chunk k: [64 * (2^k - 1), 64 * (2^(k+1) - 1))
//
// For index i, let q = i / 64 + 1; then k = floor(log2(q)) and the offset in the chunk is
// i - 64 * (2^k - 1). Both are a shift, a bit-width and a subtraction: no loop, no lock.
// Doubling keeps the chunk table small (18 pointers) while the first chunks stay small, so a pool
// that holds a handful of events costs a few kilobytes.
//
// Growth is lock-free: the thread that finds the next index's chunk missing allocates it and
// installs it with a compare-exchange (a thread that loses that race frees its own copy, which
// was never published); then the index is claimed with a compare-exchange of the counter.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

namespace evpool::detail {

/// Bits of a node index; the rest of a stack head's 64-bit word is its ABA tag.
inline constexpr unsigned kIndexBits = 24;
inline constexpr unsigned kMaxTagBits = 64 - kIndexBits;

/// The index that means "no node": the end of a list (all kIndexBits ones).
inline constexpr std::uint32_t kNilIndex = (std::uint32_t{1} << kIndexBits) - 1;

template <class Node, template <class> class Atomic>
class NodeArena {
 public:
  static constexpr std::uint32_t kFirstChunkLog2 = 6;
  static constexpr std::uint32_t kFirstChunkSize = 1u << kFirstChunkLog2;
  static constexpr std::uint32_t kMaxChunks = kIndexBits - kFirstChunkLog2;

  // The last chunk ends at kFirstChunkSize * (2^kMaxChunks - 1) = 2^24 - 64: every index the
  // arena hands out is below kNilIndex, so the sentinel never names a node.
  static_assert(std::uint64_t{kFirstChunkSize} * ((std::uint64_t{1} << kMaxChunks) - 1) <= kNilIndex);
  static_assert(kMaxChunks == 18);

  /// How many nodes the arena can hand out.
  static constexpr std::uint32_t kCapacity = kFirstChunkSize * ((1u << kMaxChunks) - 1);
  static_assert(Atomic<Node *>::is_always_lock_free);
  static_assert(Atomic<std::uint32_t>::is_always_lock_free);

  NodeArena() = default;
  NodeArena(const NodeArena &) = delete;
  NodeArena &operator=(const NodeArena &) = delete;

  ~NodeArena() {
    for (std::uint32_t k = 0; k < kMaxChunks; ++k)
      delete[] chunks_[k].load(std::memory_order_relaxed);  // single-threaded by contract
  }

  /// Returns the index of a fresh, value-initialised node. Thread-safe; lock-free apart from the
  /// allocation of a new chunk (operator new). Throws std::bad_alloc, or std::length_error once
  /// all kCapacity = 2^24 - 64 indices are used; either way nothing was claimed and the arena is unchanged.
  std::uint32_t allocate() {
    // Relaxed: the counter only hands out distinct numbers; the node's memory is published by
    // the chunk pointer, and the node's contents by the stack that later carries the index.
    std::uint32_t index = next_unused_.load(std::memory_order_relaxed);
    for (;;) {
      if (index >= kCapacity)
        throw std::length_error("evpool: the node arena is full: all " + std::to_string(kCapacity) +
                                " nodes (2^24 - 64) are in use");
      // The chunk exists before the index is claimed, so a failed allocation claims nothing.
      ensure_chunk(chunk_of(index));
      if (next_unused_.compare_exchange_weak(index, index + 1, std::memory_order_relaxed, std::memory_order_relaxed))
        return index;
    }
  }

  /// The node at `index`, which must have come from allocate(). Thread-safe, wait-free.
  Node &operator[](std::uint32_t index) noexcept {
    const std::uint32_t k = chunk_of(index);
    // Relaxed: whoever holds `index` got it from allocate() (which saw the chunk installed) or
    // from a stack whose acquire load synchronised with the release that published the index;
    // either way the chunk pointer's store happens-before this load.
    Node *chunk = chunks_[k].load(std::memory_order_relaxed);
    return chunk[index - chunk_start(k)];
  }

  /// Number of indices handed out so far (nodes ever allocated). Thread-safe, wait-free.
  std::uint32_t allocated() const noexcept { return next_unused_.load(std::memory_order_relaxed); }

 private:
  static constexpr std::uint32_t chunk_of(std::uint32_t index) noexcept {
    return static_cast<std::uint32_t>(std::bit_width((index >> kFirstChunkLog2) + 1u)) - 1u;
  }
  static constexpr std::uint32_t chunk_start(std::uint32_t k) noexcept {
    return kFirstChunkSize * ((1u << k) - 1u);
  }
  static constexpr std::uint32_t chunk_size(std::uint32_t k) noexcept { return kFirstChunkSize << k; }
  static_assert(chunk_of(0) == 0 && chunk_of(kFirstChunkSize - 1) == 0);
  static_assert(chunk_of(kFirstChunkSize) == 1 && chunk_start(1) == kFirstChunkSize);
  static_assert(chunk_of(kCapacity - 1) == kMaxChunks - 1);

  void ensure_chunk(std::uint32_t k) {
    // Acquire pairs with the release of the installing compare-exchange below, so that the
    // value-initialised nodes of a chunk installed by another thread are visible here.
    if (chunks_[k].load(std::memory_order_acquire) != nullptr) return;
    std::unique_ptr<Node[]> fresh(new Node[chunk_size(k)]());
    Node *expected = nullptr;
    // Release publishes the initialised nodes; acquire on failure sees the winner's nodes.
    if (chunks_[k].compare_exchange_strong(expected, fresh.get(), std::memory_order_release,
                                           std::memory_order_acquire))
      fresh.release();
  }

  Atomic<std::uint32_t> next_unused_{0};
  Atomic<Node *> chunks_[kMaxChunks] = {};
};

}  // namespace evpool::detail
