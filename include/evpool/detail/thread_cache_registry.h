// evpool: every thread cache of one pool, and the one way a purger takes them from their owners.
// Private to the library.
//
// Design rationale
// ----------------
// A pool must reach the cache of every thread that used it: Purge and Trim empty them, stats()
// reads them, the pool's destructor closes them, a fork() child forgets them, and the caches of
// exited threads must be collected. All of that happens here, under one lock (registry_lock.h),
// off every fast path. The caches are kept in a list a fork() child can always walk
// (cache_registry.h).
//
// Quiescing. A purger reaches a cache only through the owner/purger handshake of thread_cache.h,
// and always in the same three steps, which quiesce() is the one copy of:
//
//   1. request every cache (bypass = kDraining or kClosed): later owner calls go around it;
//   2. one heavy fence (Fence::purger_fence) for all of them, not one per cache;
//   3. wait, cache by cache, for an owner call in progress to end; then the cache is the purger's.
//
// Requesting them all before the one fence is what makes a Purge cost one membarrier, whatever
// the number of threads. reopen_all() ends what quiesce(kDraining) began; a closed cache stays
// closed.
//
// Leaving the registry. A cache leaves (collected after its thread exited, or closed with the pool)
// by sweep_out(): unlinked first, let go after, so that a fork() child, which walks the list as
// fork() left it, never meets a freed cache. Its lease count is retired before it is unlinked: a
// child forked in between counts those leases twice (its core then leaks) rather than never (its
// core would be deleted under live leases).
#pragma once

#include <cstdint>
#include <mutex>

#include "evpool/detail/cache_registry.h"
#include "evpool/detail/registry_lock.h"

namespace evpool::detail {

/// `Cache` is a ThreadCache; `Policy` gives the lock's wait and the fence. Every member but
/// forget_in_child() is called with the lock held (lock()).
template <class Cache, class Policy>
class ThreadCacheRegistry {
 public:
  using Fence = typename Policy::fence;
  using Guard = std::unique_lock<RegistryLock<Policy>>;

  /// Blocking; taken only off the fast path.
  [[nodiscard]] Guard lock() noexcept { return Guard(lock_); }

  /// Adds a new cache; false (the cache is not added) once the pool has closed.
  bool add(Cache &cache) noexcept {
    if (closed_) return false;
    caches_.add(cache);
    return true;
  }

  /// Steps 1 to 3 of the rationale, then visit(cache) for each cache, which the purger now holds.
  /// The caches stay requested: reopen_all() gives them back. Waits only for owner calls in
  /// progress.
  template <class Visit>
  void quiesce(typename Cache::Bypass state, Visit &&visit) noexcept {
    request_all(state);
    caches_.for_each([&](Cache &cache) {
      cache.purger_wait_until_idle();
      visit(cache);
    });
  }

  void reopen_all() noexcept {
    caches_.for_each([](Cache &cache) { cache.purger_reopen(); });
  }

  /// Each cache whose thread has exited: leaving(cache), its lease count retired, then it leaves
  /// the registry and is let go.
  template <class Leaving>
  void collect_abandoned(Leaving &&leaving) noexcept {
    sweep_out([](Cache &cache) { return cache.abandoned(); }, leaving);
  }

  /// The pool closes: no cache is added any more; every cache is closed for good (quiesced as in
  /// quiesce(kClosed)), visited with leaving(cache), its lease count retired, unlinked and let go.
  /// A thread that still holds one drops it when it next looks it up, or when it exits.
  template <class Leaving>
  void close(Leaving &&leaving) noexcept {
    closed_ = true;
    request_all(Cache::kClosed);
    sweep_out(
        [](Cache &cache) {
          cache.purger_wait_until_idle();
          return true;
        },
        leaving);
  }

  /// The lease counts of caches that left (collected, closed, or forgotten in a fork child).
  std::int64_t retired_leases() const noexcept { return retired_leases_; }

  /// In a fork() child, by its one forgetting thread: no thread of the child can hold the lock or
  /// be inside a cache (they all wait for the forgetting thread), so the lock is reset and every
  /// cache forgotten (thread_cache.h), its lease count retired.
  void forget_in_child() noexcept {
    lock_.reset_in_child();
    caches_.for_each([this](Cache &cache) { retired_leases_ += cache.forget_in_child(); });
  }

 private:
  // Steps 1 and 2 of quiescing: every cache requested, then the one heavy fence.
  void request_all(typename Cache::Bypass state) noexcept {
    caches_.for_each([state](Cache &cache) { cache.purger_request(state); });
    Fence::purger_fence();
  }

  // Each cache for which leaves(cache) holds: leaving(cache), its lease count retired, unlinked,
  // and only then let go (see "Leaving the registry").
  template <class Leaves, class Leaving>
  void sweep_out(Leaves &&leaves, Leaving &leaving) noexcept {
    caches_.sweep(
        [&](Cache &cache) {
          if (!leaves(cache)) return false;
          leaving(cache);
          retired_leases_ += cache.purger_leases();
          return true;
        },
        [](Cache &cache) { cache.let_go(); });
  }

  RegistryLock<Policy> lock_;
  CacheRegistry<Cache, std::atomic> caches_;  // std::atomic: see thread_cache.h's cold members
  std::int64_t retired_leases_ = 0;
  bool closed_ = false;
};

}  // namespace evpool::detail
