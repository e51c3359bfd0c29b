// evpool: a pool's cap per device, and the error of a call the cap stops.
//
// A pool may be given a cap: the most handles of one device that exist through it at once, handed
// out (got or leased), idle, busy, set aside or retired. It is a bound, whatever order Gets and
// Puts come in:
//
// - Get creates a handle only below the cap. At the cap it waits, as on a semaphore, for a handle
//   to become idle: a busy one whose work completes, or one handed back. The GPU or the holders end
//   the wait. A thread that itself holds every handle of the cap and asks for one more waits for
//   ever: the pool cannot tell that apart from handles that other threads hold for a while
//   (docs/streams.md, "A cap"). GetWithin and LeaseWithin wait at most a given time, and then
//   throw CapReachedError, naming the device, the cap and how many handles this process holds.
//   Waiters share their flushes of the threads' caches (the first to wait flushes, then one every
//   64 rounds): a handle put back into a thread's cache after the last flush is found at the next,
//   so a GetWithin whose patience is shorter than that may give up with one idle in a cache.
// - A handle handed out stays counted until it is put back (or its lease ends), so a Get at the
//   cap waits even while every handle is out. A got handle that its holder destroys instead (a
//   CUDAEvent dropped while unwinding, say) keeps its place for the pool's life: the pool cannot
//   see it go, and reports it as outstanding. A lease's release() takes its handle out of the
//   count for good; to give it back, PutForeign.
// - A handle the pool did not hand out takes a place when it is put in: a bare handle (one that
//   records no device), any handle given to PutForeign, and every stream given to
//   CUDAStreamPool::Put (its Get hands out leases). At the cap such a Put is refused with
//   CapReachedError, before anything changed: the caller still owns the handle. (Refused rather
//   than destroyed: the caller may hand it elsewhere, and a Put never calls the driver.) A handle
//   that records its device given to Put is taken for one of the pool's own coming back: hand
//   outside handles in with PutForeign, or the cap may be passed by as many (never lowered: the
//   count stops at 0 when such a handle is destroyed).
//
// The count is written only where a handle is created, destroyed, let go or taken in from outside,
// never on a Get or Put of the pool's own handles (detail/device_depots.h, "The cap").
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "evpool/detail/depot.h"

namespace evpool {

/// No cap: Get creates whenever it finds no idle handle.
inline constexpr std::size_t kUncapped = detail::kUnlimitedKept;

/// A call stopped by a pool's cap: a bounded Get that found no idle handle in time, or a Put of a
/// handle from outside the pool at the cap (the caller still owns the handle). what() says which,
/// with the figures below and what the pool holds.
class CapReachedError : public std::runtime_error {
 public:
  CapReachedError(const std::string &what, int device, std::size_t cap, std::size_t held)
      : std::runtime_error(what), device_(device), cap_(cap), held_(held) {}
  /// The device whose cap was reached.
  int device() const noexcept { return device_; }
  /// The pool's cap per device (BasicHandlePool::max_per_device()).
  std::size_t cap() const noexcept { return cap_; }
  /// The device's handles held in this process, out of the pool's reach, when it was thrown: got
  /// or leased and not handed back, or idle in a thread's cache (a snapshot).
  std::size_t held() const noexcept { return held_; }

 private:
  int device_;
  std::size_t cap_;
  std::size_t held_;
};

}  // namespace evpool
