// evpool: a Treiber stack of arena indices with an ABA tag. Private to the library.
//
// Design rationale
// ----------------
// Head word layout (one 64-bit atomic, always lock-free on x86-64 and aarch64 with GCC and Clang,
// no libatomic, no cmpxchg16b):
//
//    63                                        24 23                      0
//   +--------------------------------------------+------------------------+
//   |  tag (TagBits used, <= 40)                  |  index of the top node |
//   +--------------------------------------------+------------------------+
//
// The index names a node of a NodeArena (kNilIndex: empty). Indices, not pointers, make the word
// independent of how many address bits a pointer uses (5-level paging, HWASan, ARM MTE tags).
// 24 index bits (16,777,215 nodes; an arena that would need more throws std::length_error) leave
// 40 bits to the tag, which is where the width matters.
//
// Why ABA cannot strike: every successful compare-exchange of the head (push, pop, pop_all,
// push_chain) writes tag + 1, computed from the value it just compared against. A pop that loaded
// (A, t) and read A.next = B can succeed only if the head still equals (A, t) bit for bit, which
// requires exactly a multiple of 2^TagBits successful writes of this head while the pop is stalled
// between its load and its compare-exchange. The fastest rate measured on one head is about 75 M
// writes a second (one core doing Get+Put pairs back to back); 2^32 writes then take 57 s, a stall
// that SIGSTOP, a debugger, a paused VM or swapping produce routinely, and that was shown to hand
// out destroyed events. With 40 bits it takes 2^40 / 75e6 = 14,660 s, over 4 hours of one thread
// stalled inside one pop while every other thread hammers that one head without pause; behind the
// per-thread caches a head is written once per magazine, so the real rate is far lower still.
// test/interleaving_test.cc drives exactly that stalled pop with a narrow tag and sees the
// corruption; the production width is the only change between that build and this one.
//
// Why no node is freed early: nodes live in a NodeArena that frees nothing before it is destroyed,
// so the stale read of A.next by a pop that is about to fail reads live memory; `next` is atomic,
// so that read is no data race either.
//
// Memory orders (each is justified again where it is used):
// - push: release on the successful CAS publishes the node's payload and its `next`.
// - pop: acquire on every load of the head (the initial load and each failed CAS) synchronises
//   with the push that published the top node: every later write of the head is itself an RMW,
//   so it continues that push's release sequence. The successful CAS is acquire too, though the
//   load before it already synchronised: C++11 forbade a failure order stronger than the success
//   order and GCC 12 still rejects that pairing with -Winvalid-memory-model, and the acquire costs
//   nothing on x86 (lock cmpxchg is a full barrier) and an ldaxr for an ldxr on Arm.
// - `next` is read and written relaxed: it is ordered by the head operations around it.
// std::atomic_thread_fence is not used anywhere: ThreadSanitizer does not model it.
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/backoff.h"
#include "evpool/detail/node_arena.h"

namespace evpool::detail {

/// A lock-free LIFO of node indices. `Nodes` is the arena the indices name: `nodes[i].next` is
/// node i's `Atomic<uint32_t>` link, holding an index below 2^kIndexBits or kNilIndex. All member functions are thread-safe and lock-free; none
/// allocates or throws. `Backoff` is called after each failed compare-exchange of one operation
/// (see backoff.h).
template <template <class> class Atomic, unsigned TagBits = kMaxTagBits, class Backoff = ExponentialBackoff>
class TaggedIndexStack {
  static_assert(TagBits >= 1 && TagBits <= kMaxTagBits, "the tag shares a 64-bit word with a kIndexBits-bit index");
  static_assert(Atomic<std::uint64_t>::is_always_lock_free, "the head must be one lock-free 64-bit word");

 public:
  static constexpr std::uint64_t kTagMask = (std::uint64_t{1} << TagBits) - 1;

  TaggedIndexStack() = default;
  TaggedIndexStack(const TaggedIndexStack &) = delete;
  TaggedIndexStack &operator=(const TaggedIndexStack &) = delete;

  /// Pushes node `index`, whose payload the caller has written.
  template <class Nodes>
  void push(std::uint32_t index, Nodes &nodes) noexcept {
    push_chain(index, index, nodes);
  }

  /// Pushes the chain first -> ... -> last, already linked through `next`, in one step.
  template <class Nodes>
  void push_chain(std::uint32_t first, std::uint32_t last, Nodes &nodes) noexcept {
    // Relaxed: a push reads nothing of other nodes; it only needs the current top's index.
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    for (Backoff backoff;; backoff()) {
      // Relaxed: published by the release CAS below.
      nodes[last].next.store(index_of(head), std::memory_order_relaxed);
      // Release: a popper that acquires this head value (or a later one) sees the payload and
      // `next` of every node of the chain. Relaxed on failure: we only retry with the new value.
      if (head_.compare_exchange_weak(head, successor(head, first), std::memory_order_release,
                                      std::memory_order_relaxed))
        return;
    }
  }

  /// Pops the top node; returns kNilIndex if the stack is empty. On success the caller owns the
  /// node exclusively and sees the payload its pusher wrote.
  template <class Nodes>
  std::uint32_t pop(Nodes &nodes) noexcept {
    // Acquire: synchronises with the push that published the top node (see the header comment).
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (Backoff backoff;; backoff()) {
      const std::uint32_t top = index_of(head);
      if (top == kNilIndex) return kNilIndex;
      // Relaxed, and possibly stale: if another thread popped `top` since our load, this value is
      // garbage, but then the tag has moved on and the CAS below fails.
      const std::uint32_t next = nodes[top].next.load(std::memory_order_relaxed);
      // Failure: acquire, because `head` is reloaded and we go on to read the new top's `next`.
      // Success: acquire only to match the failure order (see the header comment); the load that
      // produced `head` already synchronised with the push of `top`.
      if (head_.compare_exchange_weak(head, successor(head, next), std::memory_order_acquire,
                                      std::memory_order_acquire))
        return top;
    }
  }

  /// Detaches the whole stack in one step and returns its top (kNilIndex if empty). The caller
  /// owns every node of the returned chain and walks it through `next`.
  std::uint32_t pop_all() noexcept {
    // Acquire: as in pop, we will read the payload and `next` of every node of the chain.
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (Backoff backoff;; backoff()) {
      if (index_of(head) == kNilIndex) return kNilIndex;
      if (head_.compare_exchange_weak(head, successor(head, kNilIndex), std::memory_order_acquire,
                                      std::memory_order_acquire))
        return index_of(head);
    }
  }

 private:
  static constexpr std::uint64_t kIndexMask = (std::uint64_t{1} << kIndexBits) - 1;

  static constexpr std::uint32_t index_of(std::uint64_t word) noexcept {
    return static_cast<std::uint32_t>(word & kIndexMask);
  }
  static constexpr std::uint64_t tag_of(std::uint64_t word) noexcept {
    return (word >> kIndexBits) & kTagMask;
  }
  // The word that replaces `word` when `index` becomes the top: the tag advances on every
  // successful write of the head, derived from the value the CAS compares against.
  static constexpr std::uint64_t successor(std::uint64_t word, std::uint32_t index) noexcept {
    return (((tag_of(word) + 1) & kTagMask) << kIndexBits) | index;
  }
  static_assert(kNilIndex == kIndexMask, "the empty marker is the all-ones index");
  static_assert(index_of(successor(std::uint64_t{5} << kIndexBits | 7, 9)) == 9);
  static_assert(tag_of(successor(std::uint64_t{5} << kIndexBits | 7, 9)) == (6 & kTagMask));
  static_assert(index_of(successor(kTagMask << kIndexBits | 7, kNilIndex)) == kNilIndex &&
                    tag_of(successor(kTagMask << kIndexBits | 7, kNilIndex)) == 0,
                "the tag wraps without touching the index");

  Atomic<std::uint64_t> head_{std::uint64_t{kNilIndex}};
};

}  // namespace evpool::detail
