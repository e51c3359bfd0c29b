// evpool: one device's retired handles: those that a Put or the end of a lease could not keep,
// waiting for a call that may call the driver. Private to the library.
//
// Design rationale
// ----------------
// Destroying a handle is a driver call: it may block (cudaEventDestroy did: pytorch#97066,
// #122732), and CUDA forbids it on its own threads (a graph user object's destructor, a host
// function). A Put or a lease may end on such a thread, and sits on a scheduler's hot path anyway.
// So neither destroys: what they cannot keep (over the idle limit) is retired here, in magazines of
// the pool's arena on a tagged Treiber stack, as the depot keeps its idle ones. Retired handles
// leave in one of three ways, each on a call that may call the driver:
//
//   reused      a Get that finds no idle handle takes a retired one instead of creating one
//   destroyed   by a Get off its fast path (one that refills its cache or goes around it: every
//               Get of a pool without caches) or a thread's 256th Get of the device from its
//               cache (its look), those that demand has shown surplus, at most
//               kRetiredDestroyedPerGet at a time; every one by Trim, Purge (a snapshot, so that
//               Puts meanwhile cannot keep them going) and the pool's end
//   forgotten   in a fork() child, as the idle ones
//
// Surplus: a working set, as illumos kmem's depot keeps one for its magazines
// (kmem_depot_ws_update, kmem_depot_ws_reap). Time is counted in Gets, and in windows of them: a
// Get off the fast path counts one; the Gets a thread's cache serves count in batches of 256, each
// reported by the 256th (its look: a byte the owner's line holds counts them down, and the look
// costs one relaxed load where nothing is retired), so that time passes whatever the caches
// absorb. Each window remembers its low, the fewest handles
// retired at any moment of it; the handles under both the last window's low and this one's so far
// stayed retired through a whole window, unused, and only those are destroyed. A window lasts
// retired_window_gets: 64 Gets, plus four times the handles that could serve its Gets, the retired
// ones at its start and the depot's idle limit. So a demand that comes back within a window finds
// its handles: in a steady cycle (N got, then put back) the Gets take every retired handle before
// the window that began with them ends, each window's low is 0, and after the first round nothing
// is created or destroyed. A fixed window cannot do that: a cycle longer than it drains the
// retired handles across windows whose lows are all above 0.
//
// Measured on the seam (the host backend, an idle limit of 4 unless said; handles created in the
// tenth round, without caches / with them), for the rule before this one, which destroyed 8 on
// every Get off the fast path before it looked for a handle, a fixed window of 64 Gets, and
// windows of one, two and four times the stock:
//
//   round                          before        fixed 64       x1        x2        x4
//   600 got, then put back         534 / 226     472 / 0        0 / 0     0 / 0     0 / 0
//   2,000 got, then put back       1,778 / 1,364 1,680 / 1,032  0 / 0     0 / 0     0 / 0
//   1,010 got, limit 1,000         10 / 0        10 / 0         0 / 0     0 / 0     0 / 0
//   a ramp to 600: 2 Gets, 1 Put   565 / 226     506 / 0        192 / 0   0 / 0     0 / 0
//   4 Gets, 3 Puts                 582 / 228     552 / 0        350 / 0   215 / 0   0 / 0
//   9 Gets, 8 Puts                 2,960 / 232   586 / 0        516 / 0   454 / 0   316 / 0
//   600, then 50 x 300             13,884 / 252  9,072 / 0      300 / 0   300 / 0   300 / 0
//   Gets until a fallen demand's   75 / 2,200    150 / 46,600   807 /     1,947 /   4,227 /
//   retired handles are all gone                                157,200   315,000   630,600
//
// (The last row: after two rounds of 600, rounds of 1 Get without caches, of 100 with them; then
// only the Gets that refilled counted, about one in a hundred, hence the larger figures, and with
// rounds of 10, which the caches absorb whole, the retired handles stayed through 50 M Gets. With
// the caches' looks, the same rounds of 10 destroy them all within the bound below.)
// Four times: a ramp that grows by one handle in four Gets keeps its handles; the price is how long
// a fallen demand keeps its own, about two windows. What a window cannot see, it destroys: bursts
// that return after more than a window of smaller demand (600, then 50 rounds of 300 without
// caches) find their handles gone and create them again, and a slower ramp creates part of its
// handles each round. Rejected too, by reasoning rather than measure: destroying only on Gets that
// found an idle handle without needing a retired one, which a ramp defeats, since its Gets
// alternate between the two.
//
// How long a retired handle outlives its retirement: a stock of R retired handles that no Get takes
// stays retired through the rest of the window in progress and one whole window, and is destroyed
// during the next, kRetiredDestroyedPerGet per counted Get or look. A window that begins with R
// retired lasts retired_window_gets(R, idle bound) Gets, rounded up to a look's 256 with caches. So
// a stock of R is destroyed within about three windows plus R / kRetiredDestroyedPerGet counted
// Gets (looks: times 256), and each thread's Gets count within 256 of being made; with no Get at
// all, only Trim and Purge destroy (test/retired_events_test.cc,
// RetiredHandlesGoWithinTheBoundEvenWhenTheCacheAbsorbsEveryGet: 540 retired after a peak of 600
// and an idle limit of 4, rounds of 10 absorbed by the cache, all destroyed within that bound).
//
// Bound: a handle the pool created is retired only after it was out, and a Get creates only when
// it finds neither an idle nor a retired one. So of the handles the pool created, those alive (out,
// idle or retired) never exceed the most that were out at once plus the idle bound, as without
// retirement, whatever is destroyed when. Handles the pool never handed out (adopted by a Put) are
// bounded only by the caller: Puts of them over the limit retire them all, and only the Gets'
// destroying of surplus, Trim and Purge destroy them.
//
// The count is kept beside the head, on its own line: one relaxed add per magazine retired or
// taken, on paths that move a magazine anyway. It runs ahead of the stack while a magazine moves
// (counted before its push, uncounted after its pop), so an emptiness test may send a caller to an
// empty stack, never past a filled one for good. The window is on a third line: a Get off the fast
// path that finds retired handles counts itself there (one relaxed add), and a take lowers the low
// when the count falls under it (a compare-exchange); a Get that finds none reads the count alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/node_arena.h"

namespace evpool::detail {

/// The most retired handles one Get off its fast path destroys: what bounds the driver calls it
/// adds (with caches, a refill happens once per magazine of Gets).
inline constexpr std::uint32_t kRetiredDestroyedPerGet = 8;

/// How many Gets off the fast path a window of the working set lasts that begins with `retired`
/// retired handles, in a depot that keeps at most `idle_bound` idle (0 without a limit): four
/// times every handle that could serve them, and a few more (see the rationale).
inline constexpr std::uint64_t retired_window_gets(std::uint64_t retired, std::uint64_t idle_bound) noexcept {
  constexpr std::uint64_t kMost = 0xFFFF'FFFF;  // 2^32 - 1 each: the sum cannot wrap
  return 64 + 4 * (std::min(retired, kMost) + std::min(idle_bound, kMost));
}

/// Thread-safety: every member may be called by any number of threads at once, except
/// forget_all() (a fork child's one forgetting thread). Progress: lock-free.
template <class Magazine, class Stack, template <class> class Atomic>
class RetiredHandles {
 public:
  using Arena = NodeArena<Magazine, Atomic>;

  /// The magazine `index` (count >= 1) joins the retired handles; the caller no longer holds it.
  void give(std::uint32_t index, Arena &arena) noexcept {
    // Relaxed: the count orders nothing; the stack's release publishes the magazine.
    count_.value.fetch_add(arena[index].count, std::memory_order_relaxed);
    stack_.value.push(index, arena);
  }

  /// A magazine of retired handles, now the caller's, or kNilIndex if there is none.
  std::uint32_t take(Arena &arena) noexcept {
    if (empty()) return kNilIndex;  // the common case: one load of a line nobody writes
    const std::uint32_t index = stack_.value.pop(arena);
    if (index != kNilIndex) count_down(arena[index].count);
    return index;
  }

  /// Every magazine of retired handles, as a chain linked through `next`, now the caller's.
  std::uint32_t take_all(Arena &arena) noexcept {
    if (empty()) return kNilIndex;
    const std::uint32_t first = stack_.value.pop_all();
    // The chain is ours alone since pop_all (acquire): relaxed reads of `next`.
    for (std::uint32_t index = first; index != kNilIndex; index = arena[index].next.load(std::memory_order_relaxed))
      count_down(arena[index].count);
    return first;
  }

  bool empty() const noexcept { return count() == 0; }

  /// The retired handles (for stats(); exact once no call is in progress).
  std::uint64_t count() const noexcept { return count_.value.load(std::memory_order_relaxed); }

  /// `gets` Gets on this device (one Get off its fast path, or a thread cache's batch of them,
  /// reported by its look), after the last took its handle: counts them in the working set's
  /// window, closes the window if they reach its end, and returns how many retired handles the
  /// caller may destroy now, at most `most`: those that stayed retired through the whole last
  /// window and this one so far. The caller destroys them through take(). `idle_bound`: the most
  /// handles the depot keeps idle (0 without a limit), which sets how long a window lasts.
  std::uint32_t surplus_after_gets(std::uint64_t idle_bound, std::uint32_t most, std::uint32_t gets) noexcept {
    // Nothing retired: this window's low is 0 (take() lowered it there), so nothing is surplus
    // until a whole window has passed with retired handles; the common case costs this one load.
    if (empty()) return 0;
    // Relaxed, here and for the marks: the window orders nothing (the stack publishes the handles);
    // a count read while others move magazines only makes one window a little longer or shorter.
    // The one whose Gets reach the end closes the window; the others found it open or closing.
    const std::int64_t left = window_.value.gets_left.fetch_sub(gets, std::memory_order_relaxed);
    if (left > 0 && left <= static_cast<std::int64_t>(gets)) close_window(idle_bound);
    std::uint64_t marks = window_.value.marks.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint32_t surplus = std::min({earlier_low(marks), current_low(marks), most});
      if (surplus == 0) return 0;
      // Claimed off the earlier window's low: concurrent Gets never destroy more than it together.
      if (window_.value.marks.compare_exchange_weak(marks, pack(earlier_low(marks) - surplus, current_low(marks)),
                                                    std::memory_order_relaxed, std::memory_order_relaxed))
        return surplus;
    }
  }

  /// A fork() child forgets its parent's retired handles, without destroying them; their magazines
  /// become `release_empty`'s.
  template <class ReleaseEmpty>
  void forget_all(Arena &arena, ReleaseEmpty &&release_empty) noexcept {
    for (std::uint32_t index = stack_.value.pop_all(); index != kNilIndex;) {
      const std::uint32_t next = arena[index].next.load(std::memory_order_relaxed);
      arena[index].count = 0;
      release_empty(index);
      index = next;
    }
    count_.value.store(0, std::memory_order_relaxed);
    window_.value.marks.store(0, std::memory_order_relaxed);
    window_.value.gets_left.store(static_cast<std::int64_t>(retired_window_gets(0, 0)), std::memory_order_relaxed);
  }

 private:
  // The working set's two lows, in one word so that they change together:
  //
  //    63                               32 31                                0
  //   +-----------------------------------+-----------------------------------+
  //   | the earlier window's low, less    | this window's low: the fewest     |
  //   | what was destroyed since          | retired handles seen since it     |
  //   |                                   | began                             |
  //   +-----------------------------------+-----------------------------------+
  //
  // Counts beyond 32 bits read as 2^32 - 1 there: a window then reports fewer surplus, never more.
  static constexpr std::uint64_t kLowMax = 0xFFFF'FFFF;
  static std::uint64_t pack(std::uint64_t earlier, std::uint64_t current) noexcept {
    return std::min(earlier, kLowMax) << 32 | std::min(current, kLowMax);
  }
  static std::uint32_t earlier_low(std::uint64_t marks) noexcept {
    return static_cast<std::uint32_t>(marks >> 32);
  }
  static std::uint32_t current_low(std::uint64_t marks) noexcept { return static_cast<std::uint32_t>(marks); }

  // `taken` handles left: the count goes down, and this window's low with it.
  void count_down(std::uint64_t taken) noexcept {
    // Relaxed: see surplus_after_get.
    const std::uint64_t now = count_.value.fetch_sub(taken, std::memory_order_relaxed) - taken;
    std::uint64_t marks = window_.value.marks.load(std::memory_order_relaxed);
    while (std::min(now, kLowMax) < current_low(marks) &&
           !window_.value.marks.compare_exchange_weak(marks, pack(earlier_low(marks), now),
                                                      std::memory_order_relaxed, std::memory_order_relaxed)) {
    }
  }

  // A new window begins: this one's low becomes the earlier one, and the new one's starts at the
  // count now.
  void close_window(std::uint64_t idle_bound) noexcept {
    const std::uint64_t now = count();
    window_.value.gets_left.store(static_cast<std::int64_t>(retired_window_gets(now, idle_bound)),
                                  std::memory_order_relaxed);
    std::uint64_t marks = window_.value.marks.load(std::memory_order_relaxed);
    while (!window_.value.marks.compare_exchange_weak(marks, pack(current_low(marks), now),
                                                      std::memory_order_relaxed, std::memory_order_relaxed)) {
    }
  }

  struct Window {
    // Gets off the fast path until the window closes; below 0 while its last Get closes it.
    std::atomic<std::int64_t> gets_left{static_cast<std::int64_t>(retired_window_gets(0, 0))};
    std::atomic<std::uint64_t> marks{0};  // the two lows (see pack)
  };

  CacheLinePadded<Stack> stack_;
  CacheLinePadded<std::atomic<std::uint64_t>> count_;
  CacheLinePadded<Window> window_;
};

}  // namespace evpool::detail
