// evpool: one device's retired events: those that a Put or the end of a lease could not keep,
// waiting for a call that may call the driver. Private to the library.
//
// Design rationale
// ----------------
// Destroying an event is a driver call: it may block (pytorch#97066, #122732), and CUDA forbids it
// on its own threads (a graph user object's destructor, a host function). A Put or a lease may end
// on such a thread, and sits on a scheduler's hot path anyway. So neither destroys: what they
// cannot keep (over the idle limit) is retired here, in magazines of the pool's arena on a tagged
// Treiber stack, as the depot keeps its idle ones. Retired events leave in one of three ways,
// each on a call that may call the driver:
//
//   reused      a Get that finds no idle event takes a retired one instead of creating one
//   destroyed   a bounded few by each Get that refills its cache or goes around it (every Get
//               of a pool without caches: kRetiredDestroyedPerGet), every one
//               by Trim, Purge (a snapshot, so that Puts meanwhile cannot keep them going) and
//               the pool's end
//   forgotten   in a fork() child, as the idle ones
//
// Bound: an event the pool created is retired only after it was out, and a Get creates only when
// it finds neither an idle nor a retired one. So of the events the pool created, those alive (out,
// idle or retired) never exceed the most that were out at once plus the idle bound, as without
// retirement. Events the pool never handed out (adopted by a Put) are bounded only by the caller:
// Puts of them over the limit retire them all, and only the Gets' few, Trim and Purge destroy
// them.
//
// The count is kept beside the head, on its own line: one relaxed add per magazine retired or
// taken, on paths that move a magazine anyway. It runs ahead of the stack while a magazine moves
// (counted before its push, uncounted after its pop), so an emptiness test may send a caller to an
// empty stack, never past a filled one for good.
#pragma once

#include <atomic>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/node_arena.h"

namespace evpool::detail {

/// The most retired events one Get off its fast path destroys: what bounds the driver calls it
/// adds (with caches, a refill happens once per magazine of Gets).
inline constexpr std::uint32_t kRetiredDestroyedPerGet = 8;

/// Thread-safety: every member may be called by any number of threads at once, except
/// forget_all() (a fork child's one forgetting thread). Progress: lock-free.
template <class Magazine, class Stack, template <class> class Atomic>
class RetiredEvents {
 public:
  using Arena = NodeArena<Magazine, Atomic>;

  /// The magazine `index` (count >= 1) joins the retired events; the caller no longer holds it.
  void give(std::uint32_t index, Arena &arena) noexcept {
    // Relaxed: the count orders nothing; the stack's release publishes the magazine.
    count_.value.fetch_add(arena[index].count, std::memory_order_relaxed);
    stack_.value.push(index, arena);
  }

  /// A magazine of retired events, now the caller's, or kNilIndex if there is none.
  std::uint32_t take(Arena &arena) noexcept {
    if (empty()) return kNilIndex;  // the common case: one load of a line nobody writes
    const std::uint32_t index = stack_.value.pop(arena);
    if (index != kNilIndex) count_.value.fetch_sub(arena[index].count, std::memory_order_relaxed);
    return index;
  }

  /// Every magazine of retired events, as a chain linked through `next`, now the caller's.
  std::uint32_t take_all(Arena &arena) noexcept {
    if (empty()) return kNilIndex;
    const std::uint32_t first = stack_.value.pop_all();
    // The chain is ours alone since pop_all (acquire): relaxed reads of `next`.
    for (std::uint32_t index = first; index != kNilIndex; index = arena[index].next.load(std::memory_order_relaxed))
      count_.value.fetch_sub(arena[index].count, std::memory_order_relaxed);
    return first;
  }

  bool empty() const noexcept { return count() == 0; }

  /// The retired events (for stats(); exact once no call is in progress).
  std::uint64_t count() const noexcept { return count_.value.load(std::memory_order_relaxed); }

  /// A fork() child forgets its parent's retired events, without destroying them; their magazines
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
  }

 private:
  CacheLinePadded<Stack> stack_;
  CacheLinePadded<std::atomic<std::uint64_t>> count_;
};

}  // namespace evpool::detail
