// evpool: the depot, one device's shared store of idle events, kept in magazines. Private to the
// library.
//
// Design rationale
// ----------------
// A magazine is an arena node that holds up to Capacity idle events (Bonwick and Adams, "Magazines
// and Vmem", USENIX 2001; illumos kmem.c). The depot of a device keeps two lock-free stacks of them
// (tagged_index_stack.h):
//
//   filled: magazines holding at least one event        empty: magazines holding none
//
// Per-thread caches (thread_cache.h) trade whole magazines with the depot: a thread whose cache
// ran dry takes a filled magazine (one compare-exchange buys Capacity Gets), and a thread whose
// cache overflowed hands over a full one. So the shared words are written once per Capacity
// operations instead of once per operation.
//
// Single events move too: without caches (Capacity 1), and when a cache is bypassed (during a
// Purge, while a thread is being torn down), Get takes one event out of a filled magazine and
// returns the magazine to `filled` or `empty`, and Put fills a magazine from `empty` (or a new
// node) with one event. With Capacity 1 this is exactly the design the caches were added to: per
// device, a stack of nodes holding one idle event each and a stack of spare nodes.
//
// Stripes. One pair of heads per device is what every thread of a producer/consumer pipeline
// would otherwise meet once per magazine: at 16 threads handing events over in batches, those
// two lines were the whole limit. So a depot has Policy::depot_stripes pairs (a power of two),
// each on its own lines; a thread pushes to its home stripe and takes from the stripe where it
// last found something first, then from the others in turn (depot_stripe_hints.h). A take fails
// only after finding every stripe empty, each when it looked: the scan is not one snapshot, so a
// magazine that moves from a stripe not yet looked at to one already looked at is missed, and that
// Get creates an event (counted as a miss) while the depot holds idle ones. The cost is an event
// more, never a wrong one. With one stripe (NoCachePolicy) the depot is exactly the two stacks and
// the count below, and a take fails only if the depot is empty at that instant.
//
// Idle limit: with a finite limit, one count of the events the depot holds (with one stripe,
// beside the filled stack's head: no extra cache line). Events enter only after reserving their
// places in the count (a magazine that does not fit whole is cut down to what fits, the rest
// destroyed by the caller), and leave after releasing them, so the depot never holds more than
// the limit. That count is one shared word for every stripe: an exact limit costs the pipeline
// its spreading. What the caches hold is bounded separately (two magazines per thread and device;
// see handle_pool_core.h). Without a limit the count is kept only for stats() (Policy::count_calls)
// and per stripe, beside each filled head: one relaxed add per magazine moved, on the line the
// head's compare-exchange already owns. A magazine may be counted in at one stripe and out at
// another, so single stripe counts wrap; their sum, modulo 2^64, is the depot's.
//
// Magazine layout (one node, alone on its 128-byte lines):
//
//   | next (u32) | count (u32) | handles[0] ... handles[Capacity - 1] | padding to 128 bytes |
//
// `next` links the node into one depot stack and is atomic (a popper may read it while another
// thread reuses the node; see node_arena.h). `count` and `handles` are plain: whoever holds the
// magazine (a thread's cache, a draining purger, or no one while it sits on a stack) is the only
// one to touch them, and the stacks' release/acquire publish them from one holder to the next.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/depot_stripe_hints.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/tagged_index_stack.h"

namespace evpool::detail {

inline constexpr std::size_t kUnlimitedIdle = static_cast<std::size_t>(-1);
inline constexpr std::size_t kUnlimitedKept = static_cast<std::size_t>(-1);

template <class Handle, unsigned Capacity, template <class> class Atomic>
struct alignas(kFalseSharingRange) Magazine {
  static_assert(Capacity >= 1);
  using handle_type = Handle;
  static constexpr std::uint32_t kCapacity = Capacity;

  Atomic<std::uint32_t> next{kNilIndex};
  std::uint32_t count = 0;
  Handle handles[Capacity] = {};

  bool empty() const noexcept { return count == 0; }
};

/// One device's filled and empty magazines, in Policy::depot_stripes stripes. Every member is
/// thread-safe and lock-free apart from the arena's allocation of a new node (operator new).
/// `Policy::report_corruption` is called if a magazine taken from `filled` holds nothing, which
/// only a corrupted stack (an ABA the tag failed to catch) can produce.
template <class Magazine, class Policy, class Stack>
class Depot {
  template <class T>
  using Atomic = typename Policy::template atomic<T>;

 public:
  using Arena = NodeArena<Magazine, Policy::template atomic>;
  using Handle = typename Magazine::handle_type;
  static constexpr bool kCountIdle = Policy::count_calls;
  static constexpr std::uint32_t kStripes = Policy::depot_stripes;
  static_assert(kStripes >= 1 && std::has_single_bit(kStripes), "stripes are picked with a mask");

  /// A magazine from `filled` (count >= 1), or kNilIndex if every stripe is empty. The caller
  /// owns it; its events no longer count as the depot's (their places are released).
  std::uint32_t take_filled(Arena &arena, std::size_t limit) noexcept {
    std::uint32_t stripe;
    const std::uint32_t index = pop_filled(arena, stripe);
    if (index != kNilIndex) release_places(arena[index].count, limit, stripe);
    return index;
  }

  /// Reserves places for up to `count` events under `limit`: returns how many it got (all of
  /// them without a limit). The caller then hands over that many with give_reserved.
  std::uint64_t reserve_up_to(std::uint64_t count, std::size_t limit) noexcept {
    Atomic<std::uint64_t> &idle = idle_count(limit, home());
    if (limit == kUnlimitedIdle) {
      if constexpr (kCountIdle) idle.fetch_add(count, std::memory_order_relaxed);
      return count;
    }
    // Relaxed, as in release_places. A compare-exchange loop, so that concurrent reservers never
    // together exceed the limit and each gets what is left.
    std::uint64_t held = idle.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t granted = held >= limit ? 0 : std::min<std::uint64_t>(count, limit - held);
      if (granted == 0) return 0;
      if (idle.compare_exchange_weak(held, held + granted, std::memory_order_relaxed, std::memory_order_relaxed))
        return granted;
    }
  }

  /// Hands over the magazine `index` (count >= 1) whose events hold places (reserve_up_to).
  void give_reserved(std::uint32_t index, Arena &arena) noexcept { filled(home()).push(index, arena); }

  /// Puts back a chain of magazines got from take_all_filled (first -> ... -> last, linked through
  /// `next`) whose events still hold their places.
  void restore_filled(std::uint32_t first, std::uint32_t last, Arena &arena) noexcept {
    filled(home()).push_chain(first, last, arena);
  }

  /// An empty magazine, reused or new. Throws std::bad_alloc or std::length_error (arena full);
  /// then nothing changed.
  std::uint32_t take_empty(Arena &arena) {
    const std::uint32_t index = take_spare_empty(arena);
    return index != kNilIndex ? index : arena.allocate();
  }
  /// An empty magazine if one is spare, else kNilIndex. Never allocates.
  std::uint32_t take_spare_empty(Arena &arena) noexcept {
    return pop_from_first_stripe_found<kStripes>(
               &DepotStripeHints::empty_from,
               [&](std::uint32_t stripe) { return stripes_[stripe].empty.value.pop(arena); })
        .index;
  }

  void give_empty(std::uint32_t index, Arena &arena) noexcept {
    stripes_[home()].empty.value.push(index, arena);
  }

  /// Gives a chain of empty magazines (first -> ... -> last, linked through `next`) in one step.
  void give_empty_chain(std::uint32_t first, std::uint32_t last, Arena &arena) noexcept {
    stripes_[home()].empty.value.push_chain(first, last, arena);
  }

  /// One event out of the depot, or false if it holds none.
  bool take_one(Handle &out, Arena &arena, std::size_t limit) noexcept {
    std::uint32_t stripe;
    const std::uint32_t index = pop_filled(arena, stripe);
    if (index == kNilIndex) return false;
    release_places(1, limit, stripe);
    Magazine &magazine = arena[index];
    out = magazine.handles[--magazine.count];
    // The rest of the magazine's events still hold their places: no second reservation.
    if (magazine.empty())
      stripes_[stripe].empty.value.push(index, arena);
    else
      filled(stripe).push(index, arena);
    return true;
  }

  /// Keeps one event. Returns false if it does not fit under `limit` (the caller still owns it).
  /// Throws what take_empty throws; then nothing changed.
  bool give_one(Handle handle, Arena &arena, std::size_t limit) {
    if (reserve_up_to(1, limit) == 0) return false;
    std::uint32_t index;
    try {
      index = take_empty(arena);
    } catch (...) {
      release_places(1, limit);
      throw;
    }
    Magazine &magazine = arena[index];
    magazine.handles[0] = handle;
    magazine.count = 1;
    give_reserved(index, arena);
    return true;
  }

  /// Detaches every filled magazine of every stripe; the caller owns the chain (linked through
  /// `next`) and must restore each magazine or release its events' places. Each stripe is
  /// detached in one step; magazines given meanwhile to a stripe already detached stay.
  std::uint32_t take_all_filled(Arena &arena) noexcept {
    std::uint32_t first = kNilIndex, last = kNilIndex;
    for (std::uint32_t stripe = 0; stripe < kStripes; ++stripe) {
      const std::uint32_t top = filled(stripe).pop_all();
      if (top == kNilIndex) continue;
      // The chain is ours alone since pop_all (acquire): relaxed reads and writes of `next`.
      if (last != kNilIndex) arena[last].next.store(top, std::memory_order_relaxed);
      if (first == kNilIndex) first = top;
      for (last = top; arena[last].next.load(std::memory_order_relaxed) != kNilIndex;)
        last = arena[last].next.load(std::memory_order_relaxed);
    }
    return first;
  }

  /// Releases `count` places of events that left the depot's accounting for good.
  void release_places(std::uint64_t count, std::size_t limit) noexcept {
    release_places(count, limit, home());
  }

  /// The events the depot holds (for stats(); exact once no call is in progress). Needs a finite
  /// limit or Policy::count_calls.
  std::uint64_t idle(std::size_t limit) const noexcept {
    if (kStripes == 1 || limit != kUnlimitedIdle) return idle_count(limit, 0).load(std::memory_order_relaxed);
    std::uint64_t sum = 0;  // wraps back to the depot's count (see the header comment)
    for (std::uint32_t stripe = 0; stripe < kStripes; ++stripe)
      sum += idle_count(limit, stripe).load(std::memory_order_relaxed);
    // Read one stripe after another while magazines move, a count taken out of one stripe may be
    // seen without its count into another: the sum can then fall below zero. Clamped, not wrapped.
    return static_cast<std::int64_t>(sum) < 0 ? 0 : sum;
  }

  /// Forgets everything (a fork() child's view of its parent's events): no event is destroyed.
  void forget_all(Arena &arena) noexcept {
    for (std::uint32_t index = take_all_filled(arena); index != kNilIndex;) {
      const std::uint32_t next = arena[index].next.load(std::memory_order_relaxed);
      arena[index].count = 0;
      give_empty(index, arena);
      index = next;
    }
    for (Stripe &stripe : stripes_) stripe.filled.value.idle.store(0, std::memory_order_relaxed);
    limited_idle_.value.store(0, std::memory_order_relaxed);
  }

 private:
  struct FilledStack {
    Stack stack;
    Atomic<std::uint64_t> idle{0};  // see idle_count
  };
  struct Stripe {
    CacheLinePadded<FilledStack> filled;
    CacheLinePadded<Stack> empty;
  };
  static std::uint32_t home() noexcept { return home_stripe<kStripes>(); }

  Stack &filled(std::uint32_t stripe) noexcept { return stripes_[stripe].filled.value.stack; }

  // The count a place is reserved in or released from. With one stripe, or with a finite limit
  // that must hold across stripes, one count; else the stripe's own (summed by idle()).
  Atomic<std::uint64_t> &idle_count(std::size_t limit, std::uint32_t stripe) noexcept {
    if (kStripes == 1) return stripes_[0].filled.value.idle;
    return limit != kUnlimitedIdle ? limited_idle_.value : stripes_[stripe].filled.value.idle;
  }
  const Atomic<std::uint64_t> &idle_count(std::size_t limit, std::uint32_t stripe) const noexcept {
    return const_cast<Depot *>(this)->idle_count(limit, stripe);
  }

  void release_places(std::uint64_t count, std::size_t limit, std::uint32_t stripe) noexcept {
    // Relaxed: the count orders nothing; it only bounds how many events are kept.
    if (kCountIdle || limit != kUnlimitedIdle)
      idle_count(limit, stripe).fetch_sub(count, std::memory_order_relaxed);
  }

  // A magazine from `filled`, checked: one that holds nothing is not handed on (its node is
  // dropped, never reused) and the corruption is reported.
  std::uint32_t pop_filled(Arena &arena, std::uint32_t &stripe) noexcept {
    const FoundInStripe found = pop_from_first_stripe_found<kStripes>(
        &DepotStripeHints::filled_from, [&](std::uint32_t at) { return filled(at).pop(arena); });
    stripe = found.stripe;
    if (found.index == kNilIndex || !arena[found.index].empty()) [[likely]]
      return found.index;
    Policy::report_corruption("evpool: a magazine on the filled stack holds no handle: the depot is corrupt");
    return kNilIndex;
  }

  Stripe stripes_[kStripes];
  CacheLinePadded<Atomic<std::uint64_t>> limited_idle_;  // with several stripes and a finite limit
};

}  // namespace evpool::detail
