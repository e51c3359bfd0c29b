// evpool: the counters behind BasicHandlePool::stats(). Private to the library.
//
// Design rationale
// ----------------
// What is counted, and where, so that the fast path writes no shared word and, for a hit, runs
// no instruction of its own (see pool_stats.h for the figures and their invariants):
//
//   Gets served by a cache    in the cache's slots, in the same word as the magazine's event
//                             count (thread_cache.h, Slot::tally): a hit's decrement also counts.
//   adopted Puts into a cache CachedCallCounts, beside the thread's magazines: one plain
//                             increment, only for an event that does not know its device.
//   everything else           SharedCallCounts, per pool and device: Gets that went around a
//                             cache (a miss that creates, a bypassed cache, a pool without
//                             caches), adopted Puts around a cache, the counts of collected
//                             caches, and every creation and destruction. Those paths call the
//                             driver or write the depot's shared heads anyway.
//
// Puts are not counted at all: once no call is in progress, every event the pool created or
// adopted and did not destroy is idle or outstanding, so stats() derives the outstanding events
// from the counted ones and the idle ones it finds, and the Puts from the Gets and those.
//
// The per-thread counts are plain integers: only the owner writes them, and stats() reads them
// inside the owner/purger handshake, which orders the owner's last writes before the read.
// The shared counters are std::atomic, not the policy's atomic: they take no part in the
// algorithm, and under the deterministic scheduler each of their operations would be one more
// schedule point to interleave.
#pragma once

#include <atomic>
#include <cstdint>

#include "evpool/detail/cache_line_padded.h"

namespace evpool::detail {

struct CachedCallCounts {
  std::uint64_t puts_adopted = 0;

  void count_put(bool adopted) noexcept {
    if (adopted) [[unlikely]]
      ++puts_adopted;
  }
};

/// Stands in for CachedCallCounts when a policy turns the counters off: no bytes, no work.
struct NoCallCounts {
  void count_put(bool) noexcept {}
};

struct alignas(kFalseSharingRange) SharedCallCounts {
  // Relaxed everywhere: the counters order nothing. stats() reads them under the registry lock
  // after the caches' handshakes, and the figures are exact once no call is in progress.
  std::atomic<std::uint64_t> created{0};
  std::atomic<std::uint64_t> destroyed{0};
  std::atomic<std::uint64_t> gets{0};
  std::atomic<std::uint64_t> gets_missed{0};
  std::atomic<std::uint64_t> puts_adopted{0};
  std::atomic<std::uint64_t> live_peak{0};  // the peak of created - destroyed
  std::atomic<std::uint64_t> waits_at_cap{0};
  std::atomic<std::uint64_t> cache_flushes_at_cap{0};

  void count_created(std::uint64_t count) noexcept {
    // destroyed is read before created grows: a destruction in between makes `live` too high,
    // never too low, so the peak stays an upper bound (pool_stats.h).
    const std::uint64_t gone = destroyed.load(std::memory_order_relaxed);
    const std::uint64_t now = created.fetch_add(count, std::memory_order_relaxed) + count;
    const std::uint64_t live = now > gone ? now - gone : 0;  // adopted events destroyed: below 0
    std::uint64_t peak = live_peak.load(std::memory_order_relaxed);
    while (live > peak && !live_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
    }
  }
  void count_destroyed(std::uint64_t count) noexcept {
    destroyed.fetch_add(count, std::memory_order_relaxed);
  }
  void count_put(bool adopted) noexcept {
    if (adopted) puts_adopted.fetch_add(1, std::memory_order_relaxed);
  }
  /// A collected cache's counts (its Gets, from its slots, and its adopted Puts).
  void fold_in(std::uint64_t cached_gets, const CachedCallCounts &cached) noexcept {
    gets.fetch_add(cached_gets, std::memory_order_relaxed);
    puts_adopted.fetch_add(cached.puts_adopted, std::memory_order_relaxed);
  }
  void reset() noexcept {
    for (auto *counter : {&created, &destroyed, &gets, &gets_missed, &puts_adopted, &live_peak, &waits_at_cap,
                          &cache_flushes_at_cap})
      counter->store(0, std::memory_order_relaxed);
  }
};

}  // namespace evpool::detail
