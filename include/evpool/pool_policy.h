// evpool: the policy that configures the lock-free core of BasicHandlePool.
//
// Design rationale
// ----------------
// The core (detail::TaggedIndexStack, detail::NodeArena) touches shared memory only through
// `Policy::atomic<T>`. Production code uses std::atomic; a test can substitute an atomic that hands
// control to a deterministic scheduler before every operation and so enumerate interleavings, as
// folly's IndexedMemPool does with its `Atom` template parameter.
//
// `tag_bits` is the width of the ABA tag kept beside each stack head's 24-bit index. 40 is the
// production width: wrapping takes 2^40 successful writes of one head while a single pop is stalled
// between its load and its compare-exchange, over 4 hours at the highest rate measured (see
// detail/tagged_index_stack.h). Narrower widths exist only so that tests can show that the checks
// detect the ABA corruption a narrow tag lets through.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "evpool/detail/asymmetric_fence.h"
#include "evpool/detail/backoff.h"
#include "evpool/detail/node_arena.h"

namespace evpool {

/// The production configuration: std::atomic, a 40-bit ABA tag, no backoff, per-thread caches of
/// magazines filled to 32 handles at first and up to 256 in threads that trade with the depot
/// often, depots of 8 stripes.
struct DefaultPoolPolicy {
  template <class T>
  using atomic = std::atomic<T>;

  static constexpr unsigned tag_bits = detail::kMaxTagBits;

  /// What a failed compare-exchange of a depot head does before it retries: nothing. With the
  /// depots in stripes few threads meet on one head, and retrying at once was faster than every
  /// exponential backoff tried (bench/results/h200-backoff: handoff at 16 and 128 threads, 94
  /// and 206 M/s against 82 and 170 at best, with 4 to 256 pauses at most; equal elsewhere).
  using backoff = detail::NoBackoff;

  /// The most handles a magazine of the per-thread caches holds (see detail/thread_cache.h); 0: no
  /// caches, every Get and Put goes to the shared per-device stacks. A thread's cache holds at
  /// most two magazines per device: 2 x cache_capacity idle handles. A magazine node takes
  /// 8 + cache_capacity x sizeof(handle) bytes, rounded up to 128 (2,176 with CUDA's handles).
  static constexpr unsigned cache_capacity = 256;

  /// How full a thread's Puts fill its magazines at first, and how that grows: after every
  /// `cache_growth_trades` trades of a magazine with the depot it doubles, up to cache_capacity,
  /// until the next Purge or Trim (detail/thread_cache.h, "Magazine size"). A thread whose Gets and
  /// Puts balance never trades and keeps filling to 32; a pipeline's completion thread, which only
  /// puts, reaches 256 after 12 trades and then hands over a magazine per 256 handles instead of
  /// per 32, and its producers take them as full (bench/results/h200-magazines: handoff at 16
  /// threads, 96 M/s with 32, 572 with 256). A policy that sets cache_capacity alone keeps this
  /// start of 32; FixedMagazinePolicy fixes both.
  static constexpr unsigned cache_start_capacity = 32;
  static constexpr unsigned cache_growth_trades = 4;

  /// Pairs of stack heads per device depot (a power of two; see detail/depot.h): threads that
  /// trade magazines with the depot are spread over them. More stripes spread more threads; a
  /// Get that finds the depot empty looks at every one before creating a handle.
  static constexpr unsigned depot_stripes = 8;

  /// Whether the pool counts what it does, for stats() (pool_stats.h): a plain increment per call
  /// on a line the calling thread writes anyway, and shared counters only off the fast path.
  static constexpr bool count_calls = true;

  /// What a thread does while it waits for another (for the registry lock, or for a call in
  /// progress to end before a Purge): give up the CPU. Tests substitute a scheduler hand-over.
  static void spin_wait() noexcept { std::this_thread::yield(); }

  /// Called when the pool finds its own structure corrupt (an impossible state, such as an ABA a
  /// narrow tag let through): the process cannot continue safely. Tests substitute a recorder.
  [[noreturn]] static void report_corruption(const char *what) noexcept {
    std::fprintf(stderr, "%s\n", what);
    std::abort();
  }

  /// How a cache's owner and a purger exclude each other: a compiler barrier for the owner and
  /// membarrier for the purger (a full fence on each side where the kernel refuses membarrier);
  /// under ThreadSanitizer, which models neither, seq_cst on both sides. detail/asymmetric_fence.h
  /// lists what a fence policy provides.
#if defined(__SANITIZE_THREAD__)
  using fence = detail::SymmetricFence;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  using fence = detail::SymmetricFence;
#else
  using fence = detail::AsymmetricFence;
#endif
#else
  using fence = detail::AsymmetricFence;
#endif
};

/// Same as `Base`, but without per-thread caches: every Get and Put touches the shared stacks.
template <class Base = DefaultPoolPolicy>
struct NoCachePolicy : Base {
  static constexpr unsigned cache_capacity = 0;
  static constexpr unsigned cache_start_capacity = 0;
  // Exactly the pool before the caches: one pair of heads that every thread meets on every call,
  // with exponential backoff.
  static constexpr unsigned depot_stripes = 1;
  using backoff = detail::ExponentialBackoff;
};

/// Same as `Base`, but with magazines of `Capacity` handles that never grow: a thread trades with
/// the depot once every `Capacity` Gets or Puts that its cache cannot absorb, and holds at most
/// 2 x `Capacity` idle handles per device.
/// The stream pool's policy (CUDAStreamPool): the default one with smaller magazines, 8 streams
/// growing to 32, so that a thread keeps at most 64 idle streams per device instead of 512 events.
/// A stream holds more of the driver than an event does (its own work queue), and a scheduler
/// holds far fewer streams than events at once.
struct StreamPoolPolicy : DefaultPoolPolicy {
  static constexpr unsigned cache_capacity = 32;
  static constexpr unsigned cache_start_capacity = 8;
};

template <unsigned Capacity, class Base = DefaultPoolPolicy>
struct FixedMagazinePolicy : Base {
  static constexpr unsigned cache_capacity = Capacity;
  static constexpr unsigned cache_start_capacity = Capacity;
};

/// Same as `Base`, but without counters: no stats(). To measure what the counters cost.
template <class Base = DefaultPoolPolicy>
struct NoStatsPolicy : Base {
  static constexpr bool count_calls = false;
};

/// Same as `Base`, but waiting 1, 2, 4, ... up to 256 pause instructions after each failed
/// compare-exchange of one operation (detail/backoff.h).
template <class Base = DefaultPoolPolicy>
struct ExponentialBackoffPolicy : Base {
  using backoff = detail::ExponentialBackoff;
};

}  // namespace evpool
