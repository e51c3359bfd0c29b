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
// docs/benchmarks.md, "Shared leases that another thread ends").
//
// So blocks travel as magazines of events do, in whole stacks: a thread whose spare stack is full
// when it ends one more lease hands the full stack over to the pool's depot (one compare-exchange
// for kCapacity blocks) and keeps the new block; a thread that finds its stack empty when it begins
// a lease takes a whole bundle back. An exiting thread hands over what it kept (or, if it exits
// while a purger holds its cache, the pool does when it collects the cache). A thread that both
// begins and ends its leases reaches the depot only when more than kCapacity of them are alive at
// once, or fewer than none are spare: its stack absorbs the difference.
//
// A bundle is a node of the depot's own arena (node_arena.h) that holds the blocks of one thread's
// spare stack, copied out of it (an array of pointers, so that neither side reads a block):
//
//   | next (u32) | count (u32) | blocks[0] ... blocks[kCapacity - 1] | padding to 256 bytes |
//
// The nodes sit on tagged stacks (tagged_index_stack.h): `bundles` holds those with blocks,
// `empty` the nodes free for the next hand-over. They are index stacks for the same reason as the
// event depot's: a node is reused as soon as it is popped, so a pointer stack would need its own
// ABA defence. `count` and `blocks` are plain: only a bundle's holder touches them, and the stacks'
// release and acquire publish them, and the blocks they name, to the next holder.
//
// Stripes. One pair of heads would be met by every thread of every pipeline, four times per
// bundle (a node off `empty` and the bundle onto `bundles` to give; the reverse to take): on the
// H200 host, 8 pairs of threads handing shared leases over ran at 30 M leases/s in all, 1.7 times
// what one pair did (docs/benchmarks.md, "Shared leases that another thread ends"). So, as the
// event depot does (depot.h), the depot keeps Stripes pairs, each on lines of its own: a thread
// gives to its home stripe and takes first from the stripe where it last found a bundle
// (depot_stripe_hints.h), so that the thread beginning the leases soon looks first where the
// thread ending them gives, and fewer threads meet at each pair of heads. Home stripes are dealt
// round-robin to threads in the order they first reach a striped depot, not by pipeline, so two
// ending threads may share a stripe. A taken bundle's node goes back to the `empty` of the stripe
// it came from, where its giver looks for one: a node stays in the stripe it was first given to.
//
// Memory: blocks are created only when a beginning thread finds none in its stack and none in any
// stripe of the depot when it looks there, so a pool never has more than its peak of shared
// leases alive at once plus what the threads' stacks keep (kCapacity each), what a thread holds in
// the middle of a hand-over, and a bundle given to a stripe that a scan had already passed. Trim,
// Purge and the pool's destruction delete the depot's blocks; the threads' stacks keep theirs until
// the thread or the pool goes. The nodes, for each stripe about as many as it held bundles at
// once (more while a delete_all holds a stripe's chain and givers find no node), stay with the
// arena until the pool's state is deleted. Ending a lease may therefore allocate: a node
// (a chunk of them) when the giver's stripe has none spare; without memory the stack stays with
// its thread and the block being ended is deleted.
//
// fork(): the stacks are consistent in a child whatever the parent's other threads were doing (each
// step is one compare-exchange). A bundle such a thread had popped and not yet unpacked, or a chain
// delete_all was walking, is lost to the child: memory only (a stack's worth of blocks and a node
// per such thread, or a stripe's chain), since blocks hold no event.
#pragma once

#include <bit>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/depot_stripe_hints.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/shared_lease_block.h"

namespace evpool::detail {

/// `Block` is a SharedLeaseBlock; `Stack` a TaggedIndexStack over `Atomic`; `Stripes` a power of
/// two. give and take are thread-safe and lock-free (give allocates a node when its stripe has
/// none spare); delete_all too, but it deletes blocks (operator delete). The destructor runs when
/// no thread can reach the depot.
template <class Block, template <class> class Atomic, class Stack, std::uint32_t Stripes>
class SpareBlockDepot {
 public:
  using Spare = SpareBlocks<Block>;
  static_assert(Stripes >= 1 && std::has_single_bit(Stripes), "stripes are picked with a mask");

  SpareBlockDepot() = default;
  SpareBlockDepot(const SpareBlockDepot &) = delete;
  SpareBlockDepot &operator=(const SpareBlockDepot &) = delete;
  ~SpareBlockDepot() { delete_all(); }

  /// Takes over every block of `spare` (at least one), which is then empty. False if no node could
  /// be had (no memory): then nothing changed.
  bool give(Spare &spare) noexcept {
    Stripe &stripe = stripes_[home_stripe<Stripes>()];
    std::uint32_t index = stripe.empty.value.pop(arena_);
    if (index == kNilIndex) {
      try {
        index = arena_.allocate();
      } catch (...) {
        return false;
      }
    }
    Bundle &bundle = arena_[index];
    bundle.count = spare.give_all(bundle.blocks);
    stripe.bundles.value.push(index, arena_);  // publishes the bundle and its blocks (release)
    return true;
  }

  /// Fills `spare`, which must be empty, with a bundle's blocks; false if each stripe held none
  /// when looked at.
  bool take(Spare &spare) noexcept {
    // The pop sees the giver's writes (acquire).
    const FoundInStripe found = pop_from_first_stripe_found<Stripes>(
        &DepotStripeHints::bundles_from,
        [this](std::uint32_t at) { return stripes_[at].bundles.value.pop(arena_); });
    if (found.index == kNilIndex) return false;
    Bundle &bundle = arena_[found.index];
    spare.take_all(bundle.blocks, bundle.count);
    stripes_[found.stripe].empty.value.push(found.index, arena_);  // last: the node may be refilled at once
    return true;
  }

  /// Deletes every block the depot holds; gives made meanwhile may stay.
  void delete_all() noexcept {
    for (Stripe &stripe : stripes_) delete_all(stripe);
  }

 private:
  struct alignas(kFalseSharingRange) Bundle {
    Atomic<std::uint32_t> next{kNilIndex};
    std::uint32_t count = 0;
    Block *blocks[Spare::kCapacity];
  };
  static_assert(sizeof(Bundle) == 2 * kFalseSharingRange,
                "a bundle holds 16 pointers on two whole lines of its own: givers and takers of "
                "neighbouring bundles share nothing");

  struct Stripe {
    CacheLinePadded<Stack> bundles;
    CacheLinePadded<Stack> empty;
  };

  void delete_all(Stripe &stripe) noexcept {
    const std::uint32_t first = stripe.bundles.value.pop_all();  // the chain is ours alone (acquire)
    if (first == kNilIndex) return;
    for (std::uint32_t index = first;;) {
      Bundle &bundle = arena_[index];
      for (std::uint32_t i = 0; i < bundle.count; ++i) delete bundle.blocks[i];
      bundle.count = 0;
      const std::uint32_t next = bundle.next.load(std::memory_order_relaxed);
      if (next == kNilIndex) return stripe.empty.value.push_chain(first, index, arena_);
      index = next;
    }
  }

  NodeArena<Bundle, Atomic> arena_;
  Stripe stripes_[Stripes];
};

}  // namespace evpool::detail
