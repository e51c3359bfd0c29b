// evpool: the policy that configures the lock-free core of BasicEventPool.
//
// Design rationale
// ----------------
// The core (detail::TaggedIndexStack, detail::NodeArena) touches shared memory only through
// `Policy::atomic<T>`. Production code uses std::atomic; a test can substitute an atomic that hands
// control to a deterministic scheduler before every operation and so enumerate interleavings, as
// folly's IndexedMemPool does with its `Atom` template parameter.
//
// `tag_bits` is the width of the ABA tag kept beside each stack head. 32 is the production width
// (wrapping takes 2^32 successful operations on one head while a single pop is stalled between its
// load and its compare-exchange: minutes at the measured peak rates). Narrower widths exist only so
// that tests can show that the checks detect the ABA duplicate a narrow tag lets through.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <atomic>

#include "evpool/detail/backoff.h"

namespace evpool {

/// The production configuration: std::atomic and a 32-bit ABA tag.
struct DefaultPoolPolicy {
  template <class T>
  using atomic = std::atomic<T>;

  static constexpr unsigned tag_bits = 32;

  using backoff = detail::ExponentialBackoff<>;

  /// Events per magazine of the per-thread caches (see detail/thread_cache.h); 0: no caches, every
  /// Get and Put goes to the shared per-device stacks.
  static constexpr unsigned cache_capacity = 32;
};

/// Same as `Base`, but without per-thread caches: every Get and Put touches the shared stacks.
template <class Base = DefaultPoolPolicy>
struct NoCachePolicy : Base {
  static constexpr unsigned cache_capacity = 0;
};

/// Same as `Base`, but retrying failed compare-exchanges at once.
template <class Base = DefaultPoolPolicy>
struct NoBackoffPolicy : Base {
  using backoff = detail::NoBackoff;
};

/// Same as `Base`, but with a `Bits`-wide ABA tag. For tests that demonstrate ABA; never use a
/// width below 32 in production.
template <unsigned Bits, class Base = DefaultPoolPolicy>
struct NarrowTagPolicy : Base {
  static constexpr unsigned tag_bits = Bits;
};

}  // namespace evpool
