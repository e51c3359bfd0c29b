// evpool: PoolStats, what a pool has done and holds, per device (BasicEventPool::stats()).
//
// Design rationale
// ----------------
// The counters must cost the fast path no shared write, or they would bring back the ceiling the
// caches removed. So a Get or Put served by the calling thread's cache counts in that cache, with a
// plain increment on a line the thread writes anyway; only calls that go around the cache (a miss
// that creates, a bypassed cache, a pool without caches) and creations and destructions, which call
// the driver anyway, write the pool's shared counters. stats() adds the two up, reading each cache
// through the same handshake Purge uses (thread_cache.h): it waits for a thread in the middle of a
// call, never for an idle one, and the cache's calls meanwhile go around it.
//
// Invariants, exact once no call is in progress (between calls the figures of different threads
// are read at different instants, so a busy pool may be off by the calls in flight):
//
//   gets_hit + gets_missed == gets
//   created + puts_adopted - destroyed == idle + outstanding        (every event is somewhere)
//   outstanding == gets - puts
//   idle == idle_in_depot + idle_in_caches
//   outstanding_peak_bound >= the most events ever outstanding at once
//
// The peak of outstanding is a bound, not a count: the exact peak of a sum of per-thread counts
// would need a shared write per call. The bound is the peak of (created - destroyed), tracked at
// each creation, plus every adopted event: an outstanding event was created or adopted and not
// destroyed. For a pool whose events were all created by it and never purged it is the most events
// the pool ever held, which is also what it costs in driver memory.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <cstdint>
#include <vector>

namespace evpool {

/// One device's figures. Counters start at 0 when the pool is constructed, and in a fork() child
/// (which starts empty).
struct DeviceStats {
  std::uint64_t created = 0;       ///< events the pool created: Get misses and Reserve
  std::uint64_t destroyed = 0;     ///< events the pool destroyed: Purge, Trim, over the idle limit
  std::uint64_t gets = 0;          ///< Gets and leases begun (the events handed out)
  std::uint64_t gets_hit = 0;      ///< of those, served by an idle event (cache or depot)
  std::uint64_t gets_missed = 0;   ///< of those, served by creating an event
  std::uint64_t puts = 0;          ///< Puts accepted and leases ended, of events that know their
                                   ///< device (the pool's own, handed back)
  std::uint64_t puts_adopted = 0;  ///< Puts accepted of events that do not know their device (a
                                   ///< bare handle wrapped by the caller): adopted from outside
  std::uint64_t idle = 0;          ///< idle now, in the depot and in every thread's cache
  std::uint64_t idle_in_depot = 0;
  std::uint64_t idle_in_caches = 0;
  std::int64_t outstanding = 0;    ///< handed out and not yet handed back: gets - puts
  std::uint64_t outstanding_peak_bound = 0;  ///< at least the most ever outstanding at once
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
      sum.outstanding += device.outstanding;
      sum.outstanding_peak_bound += device.outstanding_peak_bound;
    }
    return sum;
  }
};

}  // namespace evpool
