// evpool: PoolStats, what a pool has done and holds, per device (BasicHandlePool::stats()).
//
// Design rationale
// ----------------
// The counters must cost the fast path no shared write, or they would bring back the ceiling the
// caches removed, and a hit should not pay for them at all. So a Get served by the calling
// thread's cache is counted in the very word that holds its magazine's handle count (one add does
// both), a Put is not counted at all, and only calls that go around the cache (a miss that creates,
// a bypassed cache, a pool without caches), creations and destructions, which call the driver or
// touch the depot anyway, write the pool's shared counters (detail/call_counts.h). stats() adds
// them up, reading each cache through the handshake Purge uses (detail/thread_cache.h): it waits
// for a thread in the middle of a call, never for an idle one, and the cache's calls meanwhile go
// around it. No shared write is not no cost: measured against NoStatsPolicy in interleaved runs,
// counting slows a Get+Put pair by a few percent to about a tenth (the README has the figures).
//
// Counted: created, destroyed, gets, gets_missed, puts_adopted, idle_in_depot, idle_in_caches,
// retired, busy, and, by Gets at a cap only, waits_at_cap and cache_flushes_at_cap. Derived, from the conservation of handles (every handle the pool created or adopted and
// did not destroy is idle, retired, set aside busy or outstanding):
//
//   outstanding = created + puts_adopted - destroyed - idle - retired - busy
//   puts        = gets - outstanding
//   gets_hit    = gets - gets_missed
//   idle        = idle_in_depot + idle_in_caches
//
// All figures are exact once no call is in progress; between calls the counts of different
// threads are read at different instants, so a busy pool's figures may be off by the calls in
// flight. The tests check each figure against evidence from outside the pool: the backend's own
// counts of creations and destructions, the handles the test holds, and the Gets that hit before
// the backend must create (test/pool_stats_test.cc).
//
// The peak of outstanding is a bound, not a count: the exact peak of a sum of per-thread counts
// would need a shared write per call. The bound is the peak of (created - destroyed), tracked at
// each creation, plus every adopted handle: an outstanding handle was created or adopted and not
// destroyed. For a pool whose handles were all created by it and never purged it is the most handles
// the pool ever held, which is also what it costs in driver memory.

#pragma once

#include "evpool/detail/require_cxx20.h"

#include <cstdint>
#include <vector>

namespace evpool {

/// One device's figures. Counters start at 0 when the pool is constructed, and in a fork() child
/// (which starts empty).
struct DeviceStats {
  std::uint64_t created = 0;       ///< handles the pool created: Get misses and Reserve
  std::uint64_t destroyed = 0;     ///< handles the pool destroyed: Purge, Trim, over the idle limit
                                   ///< (retired first, destroyed on a later call)
  std::uint64_t gets = 0;          ///< Gets and leases begun (the handles handed out)
  std::uint64_t gets_hit = 0;      ///< of those, served by an idle handle (cache or depot)
  std::uint64_t gets_missed = 0;   ///< of those, served by creating a handle (a retired handle
                                   ///< handed out again counts as a hit)
  std::uint64_t puts = 0;          ///< Puts accepted and leases ended, of handles that know their
                                   ///< device (the pool's own, handed back); derived, see above
  std::uint64_t puts_adopted = 0;  ///< Puts accepted of handles that do not know their device (a
                                   ///< bare handle wrapped by the caller): adopted from outside. An
                                   ///< outside handle that knows its device passes for a return:
                                   ///< outstanding then reads one less
  std::uint64_t idle = 0;          ///< idle now, in the depot and in every thread's cache
  std::uint64_t idle_in_depot = 0;
  std::uint64_t idle_in_caches = 0;
  std::uint64_t retired = 0;     ///< over the idle limit, waiting to be reused or destroyed by a call
                                 ///< that may call the driver (Put never destroys)
  std::uint64_t busy = 0;        ///< handed back with work still pending, found so by a Get and set
                                 ///< aside until it completes (streams; device_depots.h)
  std::int64_t outstanding = 0;  ///< handed out and not yet handed back; derived, see above
  std::uint64_t outstanding_peak_bound = 0;  ///< at least the most ever outstanding at once
  std::uint64_t waits_at_cap = 0;  ///< Gets that found no idle handle at the cap and waited (pool_cap.h)
  std::uint64_t cache_flushes_at_cap = 0;  ///< every thread's cache emptied into the depots for them
                                           ///< (one flush serves every Get waiting then)
};

/// A pool's figures: one entry per device, indexed by ordinal.
struct PoolStats {
  std::vector<DeviceStats> devices;

  /// Every device's figures added up (the peak bound too: a sum of per-device bounds).
  DeviceStats total() const noexcept {
    DeviceStats sum;
    for (const DeviceStats &device : devices) {
      sum.created += device.created;
      sum.destroyed += device.destroyed;
      sum.gets += device.gets;
      sum.gets_hit += device.gets_hit;
      sum.gets_missed += device.gets_missed;
      sum.puts += device.puts;
      sum.puts_adopted += device.puts_adopted;
      sum.idle += device.idle;
      sum.idle_in_depot += device.idle_in_depot;
      sum.idle_in_caches += device.idle_in_caches;
      sum.retired += device.retired;
      sum.busy += device.busy;
      sum.outstanding += device.outstanding;
      sum.outstanding_peak_bound += device.outstanding_peak_bound;
      sum.waits_at_cap += device.waits_at_cap;
      sum.cache_flushes_at_cap += device.cache_flushes_at_cap;
    }
    return sum;
  }
};

}  // namespace evpool
