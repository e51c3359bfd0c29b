// evpool: the core of BasicHandlePool: its entry points and leases, over per-thread caches in
// front of per-device depots. Private to the library.
//
// Design rationale
// ----------------
// The design replaced (DALI's CUDAEventPool) keeps per-device intrusive lists of EventEntry nodes
// and a list of spare nodes, all behind one yielding spinlock; under contention it serialises every
// Get and Put of every device on that lock. Replacing the lock with one lock-free stack per device
// removes the collapse but not the ceiling: every call still writes one shared word, and no design
// that does goes past about 20 M calls a second however many threads call. So there are two
// layers, as in a magazine allocator (Bonwick and Adams 2001; illumos kmem.c):
//
//   depots          device_depots.h: per device, filled and empty magazines on stripes of two
//                   tagged Treiber stacks (depot.h, tagged_index_stack.h) over the node arena
//                   (node_arena.h); where every handle is created, counted and destroyed
//   thread caches   thread_cache.h: per thread, per pool, per device, a loaded and a previous
//                   magazine; found through the thread's directory by pool id
//                   (thread_cache_directory.h); reached by purgers through the registry
//                   (thread_cache_registry.h)
//
// Get(d) takes from the calling thread's cache, which trades a whole magazine with the depot when
// it runs dry; only when the depot is empty too is a handle created, outside any shared state. Put
// mirrors it, and over the idle limit retires a magazine's worth (retired_handles.h). With Policy::cache_capacity == 0
// there are no caches: magazines hold one handle, every call goes to the depot, and the pool is the
// plain lock-free design (per device a stack of handles and a stack of spare nodes).
//
// Handles are interchangeable within a device: Put files a handle in the calling thread's cache,
// never with the thread that created it, so a thread may exit at any time (PyTorch's per-thread
// event cache returned events to their creator and crashed when it had exited, pytorch#143470).
//
// Calls that bypass the cache and use the depot directly: while a purger holds the cache (Purge,
// Trim), after the thread's thread-local objects are torn down, when no cache could be allocated,
// and Reserve (so that every thread's first Gets hit, not only the reserver's).
//
// Purge and Trim empty every cache, also those of sleeping threads, through the handshake of
// thread_cache.h, trim the depots, and only then reopen the caches. Handles that were idle when
// they began are destroyed (beyond what Trim keeps), except what a concurrent Get that bypasses
// its cache has taken out of the depot at that moment (the rest of one magazine per such Get).
// Gets and Puts that run meanwhile bypass their caches. Purge may wait for a thread that is in the
// middle of a call on this pool; it never waits for an idle one.
//
// Idle bound: the depot never holds more than the limit; each thread's cache holds at most two
// magazines per device. So a device has at most max_idle + threads x 2 x cache_capacity idle
// handles; without a limit, the depot holds what was ever idle at once, and the caches the same
// 2 x cache_capacity per thread and device. Busy handles (streams) set aside by a Get are outside
// this bound: each has work in flight, and once it is done a Get off its fast path moves it back
// under the limit (device_depots.h).
//
// The cap (pool_cap.h): at most max_per_device handles of a device exist through the pool at
// once, handed out, idle, set aside or retired. The count is of handles created (or taken in from
// outside) and not destroyed (or let go), so it is written only where a handle is created,
// destroyed, let go or taken in (device_depots.h, "The cap"), each a driver call or a rare call:
// Gets and Puts of the pool's own handles, hits or not, write nothing for it. Counting handed-out
// handles directly would need a shared write per Get and Put, the ceiling the caches removed. At
// the cap a Get waits (wait_at_cap), for ever or until a deadline (GetWithin, LeaseWithin).
//
// Driver queries per Get (busy handles): at most three handles of the thread's cache
// (take_older_or_bypass), each handle it takes from the depot until one is idle (each busy one is
// then set aside), at most one sweep of the set-aside handles (each asked once; none if a sweep it
// waited for found them all busy), each handle it takes from the depot in a second look, filed
// there meanwhile, until one is idle, and the retired ones it takes; plus, off the fast path, the
// one magazine its tidy asks (tidy_set_aside). A Get may ask a handle three times: busy as it
// takes it from the depot, busy again in the sweep that follows (which takes back the batch it set
// aside), and idle in the second look, where another's tidy filed it. W Gets that meet a sweep
// share it (device_depots.h, sweep_set_aside).
//
// Lifetime and leases: a lease may outlive its pool. Leases are counted where they begin and end,
// in the cache of the thread that does it (no shared word is written), or, when the cache is
// bypassed, in `lease_balance_`. The pool's destructor closes every cache (waiting only for calls in
// progress), adds their counts into `lease_balance_` and removes its bias. settle_leases() is the
// one place that deletes the core: whoever brings the balance to zero, the destructor or the end
// of the last lease, as its last action; every caller of it (close, end_lease_slow) returns at
// once. A thread inside an owner section keeps the core alive until it exits the section, because
// close() takes a cache's lease count only after waiting for that section. A lease that ends after
// its pool is gone retires its handle, and the last one defers the core's end (deferred_work.h).
// A shared lease's control block is recycled through the same caches (shared_lease_block.h), and
// between threads through the pool's spare block depot (spare_block_depot.h).
//
// ABA: Get, Put and the caches move magazines between stacks and threads in every order, and Trim,
// Purge and leases reorder them further, so an ABA on a head would corrupt the depot: the 40-bit
// tag (tagged_index_stack.h) is what prevents it, and test/interleaving_test.cc shows a narrow tag
// failing.
//
// After fork() the child must not hand out or destroy its parent's handles: the first operation in
// a child forgets every idle handle, in the depots and in every cache (fork_guard.h). A call that
// finds its cache through the thread's hint makes no check, because the child starts with no
// thread holding a hint (thread_cache_directory.h) and only a lookup that has made the check sets
// one. The entry points reach the depots and the registry through depots() and registry(), which
// make the check, so a new entry point cannot forget it. Two places check by hand, after their
// lookup and before they read a cache: FlushThreadCache and a thread's exit flush, whose cache a
// fork from a signal handler may have left the child. Code under the registry's lock uses the
// members directly: the check's forgetting resets that lock, and its caller has checked.
//
// Errors leave everything as it was: arguments are checked before anything changes; Put takes
// ownership of the handle only after the last step that can throw (taking an empty magazine); a
// failed create in Get holds nothing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "evpool/deferred_work.h"
#include "evpool/detail/call_counts.h"
#include "evpool/detail/depot.h"
#include "evpool/detail/device_depots.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/detail/handle_noun.h"
#include "evpool/detail/shared_lease_block.h"
#include "evpool/detail/spare_block_depot.h"
#include "evpool/detail/thread_cache.h"
#include "evpool/detail/thread_cache_directory.h"
#include "evpool/detail/thread_cache_registry.h"
#include "evpool/handle_backend.h"
#include "evpool/pool_cap.h"
#include "evpool/pool_checks.h"
#include "evpool/pool_stats.h"

namespace evpool::detail {

template <HandleBackend Backend, class Policy>
class HandlePoolCore final : private DeferredWork {
 public:
  using owner_type = typename Backend::owner_type;
  using handle_type = typename Backend::handle_type;
  using options_type = typename Backend::options_type;
  template <class T>
  using atomic = typename Policy::template atomic<T>;
  using Fence = typename Policy::fence;
  static void spin_wait() noexcept { Policy::spin_wait(); }

  static constexpr unsigned kCacheCapacity = Policy::cache_capacity;
  static constexpr bool kCached = kCacheCapacity > 0;
  // How full a thread's magazines are filled, and how that grows (pool_policy.h, thread_cache.h).
  static constexpr unsigned kCacheStartCapacity = Policy::cache_start_capacity;
  static constexpr unsigned kCacheGrowthTrades = Policy::cache_growth_trades;
  static_assert(!kCached || (kCacheStartCapacity >= 1 && kCacheStartCapacity <= kCacheCapacity),
                "a policy with caches starts filling its magazines to 1 to cache_capacity events");
  static_assert(!kCached || kCacheGrowthTrades >= 1, "growth needs at least one trade");
  static constexpr std::uint32_t kReserveFill = kCached ? kCacheStartCapacity : 1;
  static constexpr bool kCountCalls = Policy::count_calls;
  // Handles that may be busy when put back are never handed out busy (take_older_or_bypass).
  static constexpr bool kBusyHandles = BusyHandleBackend<Backend>;
  using Magazine = detail::Magazine<handle_type, kCached ? kCacheCapacity : 1, Policy::template atomic>;
  using SharedLeaseBlock = detail::SharedLeaseBlock<HandlePoolCore>;
  using Cache = ThreadCache<HandlePoolCore>;

  /// When a bounded Get (GetWithin, LeaseWithin) gives up waiting at the cap.
  struct Deadline {
    std::chrono::steady_clock::time_point at;
    std::chrono::nanoseconds patience;
    const char *operation;
  };

  // Created with `new` by BasicHandlePool, which ends it with close().
  HandlePoolCore(Backend backend, options_type options, std::size_t max_idle_per_device, Checks checks,
                 std::size_t max_per_device)
      : depots_(std::move(backend), std::move(options), max_idle_per_device, checks, max_per_device) {
    // Only a warm-up: the process registers for membarrier (once; it may wait for the kernel)
    // here rather than in some thread's first Get.
    if constexpr (kCached) (void)Fence::owners_fence_fully();
  }
  HandlePoolCore(const HandlePoolCore &) = delete;
  HandlePoolCore &operator=(const HandlePoolCore &) = delete;

  /// The pool's destructor: closes every cache, destroys every idle handle, and deletes the core
  /// unless leases are still alive (then the last of them does). Not concurrent with Get, Put,
  /// Reserve, Trim (the pool is being destroyed); leases may end concurrently.
  void close() noexcept {
    std::int64_t leased = 0;
    if constexpr (kCached) {
      auto &caches = registry();
      auto lock = caches.lock();
      caches.close([&](Cache &cache) {
        for_each_magazine(cache, [this](Slot &slot, int device) { depots_.destroy_handles(slot, device); });
        fold_counts(cache);  // for the report of what is still outstanding
      });
      leased = caches.retired_leases();
      spare_block_depot_.delete_all();  // no cache can give or take any more
    }
    // Release: a lease that ends later and sees it (acquire) retires its handle instead.
    closed_.store(true, std::memory_order_release);
    depots().trim(0);
    settle_leases(leased - kLeaseBias, /*by_pool=*/true);  // may delete this: the last action
  }

  // ---- Entry points --------------------------------------------------------------------------
  // Get, Put and the leases are inlined into their callers down to the cache's loaded magazine, so
  // that a hit costs no call; everything past a hit is out of line (the *_slow functions), where
  // the cache's and the magazine's addresses are dead, which leaves registers to the caller's loop.

  // A handle got stays counted under a cap until it is put back (see "The cap" in
  // device_depots.h): Get and Put of the pool's own handles write no shared word.
  [[gnu::always_inline]] owner_type Get(int device_id) {
    const int device = resolve_device(device_id, "Get");
    return depots_.backend().adopt(obtain(device, 0), device);
  }

  /// Get, or, at the cap, CapReachedError once `patience` has passed with no handle idle.
  owner_type GetWithin(std::chrono::nanoseconds patience, int device_id) {
    const int device = resolve_device(device_id, "GetWithin");
    const Deadline deadline = deadline_after(patience, "GetWithin");
    return depots_.backend().adopt(obtain(device, 0, &deadline), device);
  }

  [[gnu::always_inline]] void Put(owner_type &&owner, int device_id) {
    if (!owner) [[unlikely]]
      throw_empty_put();
    // A bare handle wrapped by the caller is adopted: counted apart, out of line, so that the
    // inlined Put of the pool's own handles neither tests nor keeps the flag. It is foreign too:
    // the pool's own handles always record their device.
    if (owner.device_id() == -1) [[unlikely]]
      return put_adopted(std::move(owner), device_id);
    accept(std::move(owner), device_id, /*adopted=*/false, /*foreign=*/false);
  }

  /// Put of a handle the pool did not hand out (made elsewhere, or released from a lease): it
  /// takes a place under the cap, and is refused at the cap (CapReachedError; the caller still
  /// owns it).
  void PutForeign(owner_type &&owner, int device_id) {
    if (!owner) [[unlikely]]
      throw_empty_put();
    const bool adopted = owner.device_id() == -1;
    accept(std::move(owner), device_id, adopted, /*foreign=*/true);
  }

  void Reserve(int device_id, std::size_t count) {
    const int device = resolve_device(device_id, "Reserve");
    // Straight into the depot, in magazines filled to what a thread's cache starts with: every
    // thread's first Gets hit, not only the reserver's.
    depots().reserve(device, count, kReserveFill);
  }

  void Trim(std::size_t keep_per_device) noexcept {
    run_deferred_work();  // first, and outside the lock: it may end leases, which use the caches
    if constexpr (kCached) {
      // The caches stay closed until the depots are trimmed: a reopened cache could otherwise
      // take a magazine of handles that were idle when the Trim began out of the depot, beyond
      // the trim's reach.
      auto &caches = registry();
      auto lock = caches.lock();
      drain_caches(keep_per_device > 0);
      depots().trim(keep_per_device);
      spare_block_depot_.delete_all();  // memory the leases' peak left, not idle handles
      caches.reopen_all();
    } else {
      depots().trim(keep_per_device);
    }
  }

  /// The calling thread's cached handles go to the depots, where every thread can get them.
  /// A thread that never used the pool has no cache, and gets none.
  void FlushThreadCache() noexcept {
    if constexpr (kCached) {
      ThreadCacheDirectory &directory = this_thread_caches;
      ThreadCacheLink *link = directory.hinted(id_);
      Cache *cache = static_cast<Cache *>(link != nullptr ? link : find_thread_cache(id_));
      if (cache != nullptr && cache->owner_enter()) {
        // The fork check comes after the lookup and before the magazines are read: a hint that
        // a fork from a signal handler left the child finds them forgotten.
        forget_handles_of_parent_process();
        return_magazines(*cache);
        cache->owner_exit();
      }
    }
  }

  /// A lease begins: a handle of the device, counted as leased until end_lease. Inlined as Get.
  [[gnu::always_inline]] owner_type begin_lease(int device_id) {
    const int device = resolve_device(device_id, "Lease");
    return depots_.backend().adopt(obtain(device, 1), device);
  }
  /// begin_lease, bounded as GetWithin.
  owner_type begin_lease_within(std::chrono::nanoseconds patience, int device_id) {
    const int device = resolve_device(device_id, "LeaseWithin");
    const Deadline deadline = deadline_after(patience, "LeaseWithin");
    return depots_.backend().adopt(obtain(device, 1, &deadline), device);
  }

  /// A lease ends: `owner` (of the device it records; may be empty if the holder took it out)
  /// goes back to the pool, or is only forgotten if `forget` (a parent's handle in a fork child),
  /// or is retired if the pool is gone or cannot take it. `idle`: the holder knows that no work
  /// is pending on the handle (UniqueLease::reset_known_idle); where it lands on top of the
  /// thread's loaded magazine, the next Get there takes it without asking (thread_cache.h,
  /// top_idle). Never throws; calls no backend. May defer the core's end.
  /// Inlined down to a cache hit with room in the loaded magazine, as Put.
  [[gnu::always_inline]] void end_lease(owner_type &&owner, bool forget, bool idle = false) noexcept {
    if (!forget && owner) [[likely]] {
      if (Cache *cache = enter_own_cache()) [[likely]] {
        auto &magazines = cache->owner_magazines(owner.device_id());
        const bool room = magazines.has_room();
        if (room) [[likely]] {
          magazines.loaded.put(owner.release());
          if constexpr (kBusyHandles) magazines.top_idle = idle;
          cache->owner_count_leases(-1);
        }
        cache->owner_exit();
        if (room) [[likely]]
          return;
      }
    }
    end_lease_slow(std::move(owner), forget, idle);
  }

  /// A lease's holder takes its handle out (UniqueLease::release): under a cap, the handle
  /// leaves the pool's count (a Put of it later is foreign). The lease then ends as any other.
  void let_go(int device) noexcept { depots_.let_go(device); }

  /// A shared lease begins: its control block, recycled (shared_lease_block.h) or new, holding an
  /// handle of the device, with one reference. Throws what Get throws, and std::bad_alloc; then
  /// nothing is held. Inlined down to a spare block and a hit, both taken in one owner section.
  [[gnu::always_inline]] SharedLeaseBlock *begin_shared_lease(int device_id) {
    const int device = resolve_device(device_id, "LeaseShared");
    SharedLeaseBlock *block = nullptr;
    if (Cache *cache = enter_own_cache()) [[likely]] {
      auto &magazines = cache->owner_magazines(device);
      block = take_spare_block(*cache);
      if (block != nullptr && !magazines.loaded.empty()) [[likely]] {
        try {
          return fill_block(block, take_and_exit(*cache, magazines, device, 1), device);
        } catch (...) {  // only where handles can be busy: the Get that replaces a busy one failed
          recycle_block(block);
          throw;
        }
      }
      cache->owner_exit();
    }
    return begin_shared_lease_slow(block, device);
  }

  /// The last reference to a shared lease is gone: its handle goes back as end_lease says, its
  /// block to this thread's cache. Never throws. May delete the core. Inlined down to a loaded
  /// magazine with room, where the handle and the block go back in one owner section.
  [[gnu::always_inline]] void end_shared_lease(SharedLeaseBlock *block, bool forget) noexcept {
    if (!forget) [[likely]] {
      if (Cache *cache = enter_own_cache()) [[likely]] {
        auto &magazines = cache->owner_magazines(block->device);
        if (magazines.has_room()) [[likely]] {
          magazines.loaded.put(block->handle);
          if constexpr (kBusyHandles) magazines.top_idle = false;
          cache->owner_count_leases(-1);
          const bool kept = keep_spare_block(*cache, block);
          // The count changes before owner_exit: close() reads it only after the section ends
          // (see Lifetime in the rationale; Interleavings.ASharedLeaseEndingWhileAnotherThread-
          // DestroysThePool).
          cache->owner_exit();
          if (!kept) delete block;  // a block holds nothing to destroy
          return;
        }
        cache->owner_exit();
      }
    }
    end_shared_lease_slow(block, forget);
  }

  /// The pool's figures (pool_stats.h): the shared counters, plus every cache's, each cache read
  /// through the purger handshake (waits for a call in progress on it, never for an idle thread).
  PoolStats stats() requires kCountCalls {
    run_deferred_work();  // events of destroyed graphs are back before they are counted
    const int devices = depots().device_count();
    PoolStats result;
    result.devices.resize(static_cast<std::size_t>(devices));  // may throw: nothing held
    // The caches stay requested, and the registry locked, until the shared counters and the
    // depots are read too: a cache collected or drained in between would count twice.
    typename Registry::Guard lock;
    if constexpr (kCached) {
      lock = registry().lock();
      registry_.quiesce(Cache::kDraining, [&](Cache &cache) {
        for (int device = 0; device < devices; ++device) {
          const auto &magazines = cache.purger_magazines(device);
          DeviceStats &figures = result.devices[static_cast<std::size_t>(device)];
          figures.gets += magazines.gets();
          figures.puts_adopted += magazines.counts.puts_adopted;
          figures.idle_in_caches += magazines.loaded.count() + magazines.previous.count();
        }
      });
    }
    for (int device = 0; device < devices; ++device) {
      const SharedCallCounts &shared = depots_.counts(device);
      DeviceStats &figures = result.devices[static_cast<std::size_t>(device)];
      const auto read = [](const std::atomic<std::uint64_t> &counter) {
        return counter.load(std::memory_order_relaxed);
      };
      figures.created = read(shared.created);
      figures.destroyed = read(shared.destroyed);
      figures.gets += read(shared.gets);
      figures.gets_missed = read(shared.gets_missed);
      // Counters of a call in flight may be read half updated: the derived figures are clamped,
      // never wrapped.
      figures.gets_hit = figures.gets - std::min(figures.gets, figures.gets_missed);
      figures.puts_adopted += read(shared.puts_adopted);
      figures.idle_in_depot = depots_.idle(device);
      figures.idle = figures.idle_in_depot + figures.idle_in_caches;
      figures.retired = depots_.retired(device);
      figures.busy = depots_.set_aside(device);
      // Derived (call_counts.h): every handle created or adopted and not destroyed is idle,
      // retired, set aside busy or out.
      figures.outstanding = static_cast<std::int64_t>(figures.created + figures.puts_adopted - figures.destroyed) -
                            static_cast<std::int64_t>(figures.idle + figures.retired + figures.busy);
      const auto out = static_cast<std::uint64_t>(std::max<std::int64_t>(figures.outstanding, 0));
      figures.puts = figures.gets - std::min(figures.gets, out);
      figures.outstanding_peak_bound = read(shared.live_peak) + figures.puts_adopted;
      figures.waits_at_cap = read(shared.waits_at_cap);
      figures.cache_flushes_at_cap = read(shared.cache_flushes_at_cap);
    }
    if constexpr (kCached) {
      // Threads that exited meanwhile skipped their flush (their caches were requested): their
      // magazines go to the depots now, where other threads find them.
      collect_abandoned_caches();
      registry_.reopen_all();
    }
    return result;
  }

  /// On stderr, the handles got and never put back: in checked mode each with the stack of its Get;
  /// otherwise, with counting on, the counts alone and only once the pool is empty (`final`: its
  /// state is being destroyed). Nothing if there are none. Never throws.
  void report_outstanding(bool final = true) noexcept {
    try {
      std::string details;
      const int devices = depots_.device_count();
      if (depots_.checker()) {
        details = depots_.checker()->describe_outstanding(devices);
      } else if constexpr (kCountCalls) {
        for (int device = 0; final && device < devices; ++device) {
          const SharedCallCounts &shared = depots_.counts(device);
          // Every idle handle is destroyed by now: what is left was created or adopted and is out.
          const auto outstanding = static_cast<std::int64_t>(shared.created.load(std::memory_order_relaxed) +
                                                             shared.puts_adopted.load(std::memory_order_relaxed) -
                                                             shared.destroyed.load(std::memory_order_relaxed));
          if (outstanding > 0)
            details += "  device " + std::to_string(device) + ": " + std::to_string(outstanding) +
                       " outstanding (EVPOOL_CHECKED=1 shows where each was got)\n";
        }
      }
      if (!details.empty())
        std::fprintf(stderr, "evpool: events still outstanding (got and never put back) %s:\n%s",
                     final ? "as a pool's state is destroyed" : "at exit", details.c_str());
    } catch (...) {
    }
  }
  bool checked() const noexcept { return depots_.checker() != nullptr; }

  int device_count() const noexcept { return depots_.device_count(); }
  const options_type &options() const noexcept { return depots_.options(); }
  std::size_t max_idle_per_device() const noexcept { return depots_.max_idle(); }
  std::size_t max_per_device() const noexcept { return depots_.max_kept(); }
  std::size_t node_count() const noexcept { return depots_.node_count(); }
  std::uint64_t retired_handles(int device_id) const {
    depots_.check_device(device_id, "retired_handles");
    return depots_.retired(device_id);
  }
  std::uint64_t busy_handles(int device_id) const {
    depots_.check_device(device_id, "busy_handles");
    return depots_.set_aside(device_id);
  }

  /// For ThreadCache: the owner thread is exiting, inside its owner section: its magazines go to
  /// the depots, its spare blocks to the spare block depot. In a fork child whose thread exits
  /// before any call on this pool, the check forgets the magazines first.
  void flush_exiting_cache(Cache &cache) noexcept {
    forget_handles_of_parent_process();
    return_contents_of_leaving_cache(cache);
  }

 private:
  using Depots = DeviceDepots<Backend, Policy, Magazine>;
  using Slot = typename Cache::Slot;
  using Registry = ThreadCacheRegistry<Cache, Policy>;
  using Stack = typename Depots::Stack;
  static_assert(std::is_same_v<Slot, typename Depots::Slot>, "caches and depots hold magazines alike");

  // Leases are counted from this bias down to their true number when the pool closes, so the
  // balance cannot reach zero before then, however the counts are spread over the caches.
  static constexpr std::int64_t kLeaseBias = std::int64_t{1} << 62;

  ~HandlePoolCore() {
    // Handles a lease returned to a depot while close() was trimming it, or retired after it.
    // Through the fork check: the deferred end of a core may run in a fork child, whose parent's
    // handles these are.
    depots().trim(0);
    report_outstanding();
  }

  // ---- The fork check, by construction -----------------------------------------------------------

  // The depots and the registry, for every caller that did not find its cache through the
  // thread's hint: after the fork check (see the rationale).
  [[gnu::always_inline]] Depots &depots() noexcept {
    forget_handles_of_parent_process();
    return depots_;
  }
  [[gnu::always_inline]] Registry &registry() noexcept {
    forget_handles_of_parent_process();
    return registry_;
  }

  [[gnu::always_inline]] void forget_handles_of_parent_process() noexcept {
    if (fork_guard_.stale()) [[unlikely]]
      forget_parents_handles();
  }

  [[gnu::noinline, gnu::cold]] void forget_parents_handles() noexcept {
    fork_guard_.forget_once([this] {
      depots_.forget_all_in_child();
      // The parent's waiters at the cap are not in the child: none would ever leave, and no Get
      // of the child would be the first to wait.
      waiting_at_cap_.store(0, std::memory_order_relaxed);
      if constexpr (kCached) registry_.forget_in_child();
    });
  }

  // ---- Get and Put, past a hit -------------------------------------------------------------------

  [[gnu::noinline]] void put_adopted(owner_type &&owner, int device_id) {
    accept(std::move(owner), device_id, /*adopted=*/true, /*foreign=*/true);
  }

  // `adopted`: for the figures, the handle did not know its device. `foreign`: the pool did not
  // hand it out, so it takes a place under the cap before it is filed (where a Get could take it
  // at once), or is refused at the cap before anything changed.
  [[gnu::always_inline]] void accept(owner_type &&owner, int device_id, bool adopted, bool foreign) {
    const int device = device_for_put(owner, device_id);
    if (foreign && !depots_.take_in_within_cap(device)) [[unlikely]]
      throw_put_at_cap(device);
    bool kept;
    try {
      kept = keep(owner.get(), device, adopted);
    } catch (const DoublePutError &) {
      if (foreign) depots_.undo_take_in(device);  // the pool's copy is counted already
      (void)owner.release();  // the pool holds this very handle: the duplicate must not destroy it
      throw;
    } catch (...) {
      if (foreign) depots_.undo_take_in(device);  // the caller still owns it
      throw;
    }
    if (kept)
      (void)owner.release();
    else
      depots_.retire_one(device, owner.release());  // over the idle limit
  }

  // An idle handle of the device, or a new one; counts `leases` new leases. At the cap it waits,
  // until `deadline` if there is one. Inline down to the cache's loaded magazine.
  [[gnu::always_inline]] handle_type obtain(int device, int leases, const Deadline *deadline = nullptr) {
    if (Cache *cache = enter_own_cache()) [[likely]] {
      auto &magazines = cache->owner_magazines(device);
      // An absent magazine's slot counts 0, so one test covers both.
      if (magazines.loaded.empty()) [[unlikely]]
        return obtain_refilling(*cache, device, leases, deadline);
      // A byte the owner's line holds anyway, no shared word: every 256th Get looks at the
      // retired handles, whatever the cache absorbs (retired_handles.h, "Bound").
      if (--magazines.gets_until_look == 0) [[unlikely]]
        return obtain_and_look(*cache, magazines, device, leases, deadline);
      return take_and_exit(*cache, magazines, device, leases, deadline);
    }
    return obtain_from_depot(device, leases, deadline);
  }

  // A Get from the cache that is its thread's 256th on the device since the last look: once it
  // has its handle, it counts the batch in the retired handles' window and destroys what demand
  // has shown surplus, as a Get off its fast path does (one relaxed load where none are retired).
  [[gnu::noinline]] handle_type obtain_and_look(Cache &cache, typename Cache::DeviceMagazines &magazines,
                                                int device, int leases, const Deadline *deadline) {
    const handle_type handle = take_and_exit(cache, magazines, device, leases, deadline);
    tidy_after_taking(device, kGetsPerLook);
    return handle;
  }
  static constexpr std::uint32_t kGetsPerLook = 256;  // the wrap of DeviceMagazines::gets_until_look

  // The end of a Get from the cache: a handle out of the loaded magazine (not empty), which
  // counts the Get too (Slot::take), and the call ends. Throws only where handles can be busy
  // (from take_older_or_bypass); never for events.
  [[gnu::always_inline]] handle_type take_and_exit(Cache &cache, typename Cache::DeviceMagazines &magazines,
                                                   int device, int leases,
                                                   const Deadline *deadline = nullptr) noexcept(!kBusyHandles) {
    const handle_type handle = magazines.loaded.take();
    if constexpr (kBusyHandles)
      if (!std::exchange(magazines.top_idle, false) && is_busy(handle)) [[unlikely]]
        return take_older_or_bypass(cache, magazines, handle, device, leases, deadline);
    if (leases != 0) cache.owner_count_leases(leases);
    cache.owner_exit();
    return handle;
  }

  // Busy handles (CUDA streams: work of their last holder is still pending). The loaded
  // magazine's newest handle, just taken, is busy. Its oldest, at the bottom, has had the longest
  // to finish: if that one is idle it is handed out, the others move down one place and the busy
  // one goes back on top. The magazine is then a queue for busy handles: a thread that hands
  // streams back busy and gets them again (enqueue, hand back, get) always asks the one it handed
  // back longest ago, two queries a Get, with no shared write. (A swap of the two instead sent the
  // busy one to the bottom, to be asked next: with work longer than two Gets every Get created.)
  // Then the oldest of the previous magazine is asked. If it is busy too, the Get goes to the
  // depot, which hands out no busy handle either, sets aside the busy ones it meets and asks those
  // set aside before it creates (device_depots.h, take_idle). Asking is a driver query, so a Get
  // asks at most three handles of its cache: the rest of the cache (at most two magazines) goes to
  // the depot as the thread's hand-backs fill it, and counts in the idle bound meanwhile
  // (docs/streams.md, "The bound").
  [[gnu::noinline]] handle_type take_older_or_bypass(Cache &cache, typename Cache::DeviceMagazines &magazines,
                                                     handle_type busy, int device, int leases,
                                                     const Deadline *deadline) {
    auto &loaded = magazines.loaded;
    if (const std::uint32_t count = loaded.count(); count != 0) {
      handle_type *handles = loaded.magazine->handles;
      if (!is_busy(handles[0])) {
        const handle_type idle = handles[0];
        std::copy(handles + 1, handles + count, handles);
        handles[count - 1] = busy;
        return hand_out_from_cache(cache, idle, leases);
      }
    }
    loaded.untake();  // as it was: the Get is counted by the way that serves it
    if (auto &previous = magazines.previous; previous.held() && !previous.empty()) {
      handle_type *older = previous.magazine->handles;
      if (const std::uint32_t held = previous.count(); !is_busy(older[0])) {
        std::swap(older[0], older[held - 1]);  // to the top, where take() finds it
        return hand_out_from_cache(cache, previous.take(), leases);
      }
    }
    cache.owner_exit();
    return obtain_from_depot(device, leases, deadline);
  }

  [[gnu::always_inline]] handle_type hand_out_from_cache(Cache &cache, handle_type handle, int leases) noexcept {
    if (leases != 0) cache.owner_count_leases(leases);
    cache.owner_exit();
    return handle;
  }

  // Inside the owner's call, the loaded magazine empty: refill it and take from it, or end the
  // call and go to the depot directly.
  [[gnu::noinline]] handle_type obtain_refilling(Cache &cache, int device, int leases, const Deadline *deadline) {
    auto &magazines = cache.owner_magazines(device);
    if (!refill_cache(magazines, device)) {
      cache.owner_exit();
      return obtain_from_depot(device, leases, deadline);
    }
    const handle_type handle = take_and_exit(cache, magazines, device, leases, deadline);
    // Outside the owner section: deferred work may end leases of this very pool.
    run_deferred_work_on_the_way();
    tidy_after_taking(device);
    return handle;
  }

  // A Get off its fast path may call the driver. It runs the deferred work (deferred_work.h), which
  // may be another pool's (the end of a pool destroyed while leases were out destroys its handles),
  // and, once it took its handle (so that its own demand counts), destroys the retired handles that
  // demand has shown surplus, a few at most (DeviceDepots::destroy_surplus_retired).
  static void run_deferred_work_on_the_way() noexcept {
    if (deferred_work_waiting()) run_deferred_work();
  }

  // After a Get off its fast path took its handle: the surplus retired handles go (a few), and busy
  // handles set aside in a burst are asked again, a magazine per such Get, so that once their work
  // is done they go back under the idle limit (device_depots.h, tidy_set_aside).
  // `gets`: the Gets this one stands for (a cache's look reports its batch).
  void tidy_after_taking(int device, std::uint32_t gets = 1) noexcept {
    depots_.destroy_surplus_retired(device, gets);
    if constexpr (kBusyHandles)
      depots_.tidy_set_aside(device, [this](handle_type asked) noexcept { return is_busy(asked); });
  }

  // Bypassing the cache. Without caches, every Get: the only way the driver work is done.
  [[gnu::noinline]] handle_type obtain_from_depot(int device, int leases, const Deadline *deadline) {
    Depots &store = depots();
    run_deferred_work_on_the_way();  // first: what it gives back to this pool, this Get may take
    handle_type handle;
    if (!take_idle_from_depot(store, device, handle)) {
      if (!store.create_within_cap(device, handle))     // may throw: nothing held
        handle = wait_at_cap(store, device, deadline);  // may throw: nothing held
      else if constexpr (kCountCalls)
        store.counts(device).gets_missed.fetch_add(1, std::memory_order_relaxed);
    }
    tidy_after_taking(device);
    if constexpr (kCountCalls) store.counts(device).gets.fetch_add(1, std::memory_order_relaxed);
    if (store.checker()) store.checker()->on_handed_out(device, handle);
    if (leases != 0) count_leases(leases);
    return handle;
  }

  // An idle handle of the depot, or else a retired one, into `handle`; false if there is neither.
  // Where handles can be busy, the depot hands out only an idle one, and sets aside the busy ones
  // it meets (device_depots.h, take_idle).
  bool take_idle_from_depot(Depots &store, int device, handle_type &handle, SweepTicket *ticket = nullptr) noexcept {
    if constexpr (kBusyHandles)
      return store.take_idle(
          device, handle, [this](handle_type asked) noexcept { return is_busy(asked); }, ticket);
    else
      return store.take_one(device, handle) || store.take_retired_one(device, handle);
  }

  // Every handle the device may keep exists, and none the Get could reach was idle. The Get waits,
  // asking again with pauses growing to 1 ms, for a handle to be idle: a busy one whose work
  // completes (the GPU ends the wait, as it ends cudaStreamSynchronize's), or one handed back;
  // with a deadline (GetWithin, LeaseWithin) only until then, and then it throws CapReachedError.
  // Without one, a thread that itself holds every handle of the cap and asks for one more waits
  // for ever, as on a semaphore (pool_cap.h says why the pool cannot tell that apart).
  //
  // Idle handles may sit in other threads' caches, out of the Get's reach, so every thread's cache
  // goes to the depot (a Trim that destroys nothing), but one flush serves every waiter: a Get
  // that begins to wait while others wait already relies on theirs, and each waiter flushes every
  // kRoundsBetweenFlushes rounds only if no flush began since its last one (maybe_flush_every_cache).
  // So W Gets waiting together flush about once per kRoundsBetweenFlushes rounds, not W times. The
  // price: a handle put back into a thread's cache after the last flush is found at the next, so a
  // GetWithin beside other waiters may give up, if its patience is shorter than those rounds, with
  // such a handle idle in a cache (pool_cap.h).
  // Their looks into the set-aside handles share sweeps in the same way (the ticket;
  // device_depots.h, sweep_set_aside).
  [[gnu::noinline]] handle_type wait_at_cap(Depots &store, int device, const Deadline *deadline) {
    if constexpr (kCountCalls) store.counts(device).waits_at_cap.fetch_add(1, std::memory_order_relaxed);
    // Relaxed: the count only chooses who flushes first; the flushes are ordered by the lock.
    const bool first = waiting_at_cap_.fetch_add(1, std::memory_order_relaxed) == 0;
    struct LeaveOnReturn {
      atomic<std::uint32_t> &waiting;
      ~LeaveOnReturn() { waiting.fetch_sub(1, std::memory_order_relaxed); }
    } leave_on_return{waiting_at_cap_};
    std::uint64_t flushes_seen = cache_flushes_.load(std::memory_order_relaxed);
    SweepTicket ticket;
    handle_type handle;
    for (std::uint64_t round = 0;; ++round) {
      run_deferred_work();  // a lease that outlived its pool may give a handle back
      if constexpr (kCached)
        if (round % kRoundsBetweenFlushes == 0 && (round != 0 || first))
          maybe_flush_every_cache(device, flushes_seen);
      if (take_idle_from_depot(store, device, handle, &ticket)) return handle;
      if (store.create_within_cap(device, handle)) {  // one was destroyed or let go meanwhile
        if constexpr (kCountCalls) store.counts(device).gets_missed.fetch_add(1, std::memory_order_relaxed);
        return handle;
      }
      auto pause = std::min<std::chrono::nanoseconds>(
          std::chrono::microseconds(std::uint64_t{1} << std::min<std::uint64_t>(round, 10)), kLongestPauseAtCap);
      if (deadline != nullptr) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline->at) throw_no_idle_within(device, *deadline);
        pause = std::min<std::chrono::nanoseconds>(pause, deadline->at - now);
      }
      std::this_thread::sleep_for(pause);
    }
  }
  static constexpr std::uint64_t kRoundsBetweenFlushes = 64;
  static constexpr std::chrono::microseconds kLongestPauseAtCap{1000};

  // Every cache's magazines go to the depots (the caches stay open), unless a flush began since
  // the caller saw `flushes_seen`: that one already emptied every cache the caller waited for.
  // Either way `flushes_seen` becomes the flushes begun now.
  void maybe_flush_every_cache(int device, std::uint64_t &flushes_seen) noexcept {
    auto &caches = registry();
    auto lock = caches.lock();
    // Relaxed, under the lock, which orders the flushes and this read after them.
    const std::uint64_t begun = cache_flushes_.load(std::memory_order_relaxed);
    if (begun == flushes_seen) {
      cache_flushes_.store(begun + 1, std::memory_order_relaxed);  // the waiters' entry load reads it
      drain_caches(/*keep_handles=*/true);
      caches.reopen_all();
      if constexpr (kCountCalls)
        depots_.counts(device).cache_flushes_at_cap.fetch_add(1, std::memory_order_relaxed);
    }
    flushes_seen = cache_flushes_.load(std::memory_order_relaxed);
  }

  bool is_busy(handle_type handle) const noexcept {
    if constexpr (kBusyHandles)
      return depots_.backend().has_pending_work(handle);
    else
      return false;
  }

  // Files the handle under the device; false if it is over the idle limit (the caller retires
  // it). Throws std::bad_alloc or std::length_error when no magazine can be had; then nothing
  // changed and the caller still owns the handle. Inline down to a loaded magazine with room.
  [[gnu::always_inline]] bool keep(handle_type handle, int device, bool adopted) {
    if (Cache *cache = enter_own_cache()) [[likely]] {
      auto &magazines = cache->owner_magazines(device);
      if (!magazines.has_room()) [[unlikely]]
        return keep_making_room(*cache, device, handle, adopted);
      file_in_loaded(magazines, handle, adopted);
      cache->owner_exit();
      return true;
    }
    return keep_in_depot(handle, device, adopted);
  }

  // Inside the owner's call, the loaded magazine full: make room and file the handle. The call
  // ends also when making room throws (then nothing changed).
  [[gnu::noinline]] bool keep_making_room(Cache &cache, int device, handle_type handle, bool adopted) {
    struct ExitOnReturn {
      Cache &cache;
      ~ExitOnReturn() { cache.owner_exit(); }
    } exit_on_return{cache};
    put_into_cache(cache, device, handle, adopted);
    return true;
  }

  // Bypassing the cache. Throws DoublePutError in checked mode for a handle already idle here;
  // then nothing changed.
  [[gnu::noinline]] bool keep_in_depot(handle_type handle, int device, bool adopted) {
    Depots &store = depots();
    if (store.checker()) store.checker()->on_put(device, handle);
    bool kept;
    try {
      kept = store.give_one(device, handle);  // may throw: not counted
    } catch (...) {
      if (store.checker()) store.checker()->on_put_undone(device, handle);
      throw;
    }
    if constexpr (kCountCalls) store.counts(device).count_put(adopted);
    return kept;  // not kept: the caller retires it
  }

  // ---- Leases, past a hit --------------------------------------------------------------------------

  // `block`: the spare block the inlined way took, or nullptr if it found none (or found no
  // cache to look in: then there is none to take either).
  [[gnu::noinline]] SharedLeaseBlock *begin_shared_lease_slow(SharedLeaseBlock *block, int device) {
    if (block == nullptr) block = new SharedLeaseBlock();  // first: a failed allocation holds no handle
    handle_type handle;
    try {
      handle = obtain(device, 1);
    } catch (...) {
      recycle_block(block);
      throw;
    }
    return fill_block(block, handle, device);
  }

  [[gnu::always_inline]] SharedLeaseBlock *fill_block(SharedLeaseBlock *block, handle_type handle,
                                                      int device) noexcept {
    block->handle = handle;
    block->device = device;
    block->core = this;
    block->fork_generation = detail::fork_generation();
    // Relaxed: the block is the caller's alone until it hands the lease on, which synchronises.
    block->references.store(1, std::memory_order_relaxed);
    return block;
  }

  [[gnu::noinline]] void end_shared_lease_slow(SharedLeaseBlock *block, bool forget) noexcept {
    owner_type owner = depots_.backend().adopt(block->handle, block->device);
    recycle_block(block);  // before the lease ends: the core lives until then
    end_lease(std::move(owner), forget);
  }

  // Makes no fork check of its own: each way on finds the cache through the hint or checks.
  [[gnu::noinline]] void end_lease_slow(owner_type &&owner, bool forget, bool idle) noexcept {
    if (forget) (void)owner.release();
    if (!owner) {
      count_leases(-1);
      return;
    }
    const int device = owner.device_id();
    if (Cache *cache = enter_own_cache()) {
      try {
        put_into_cache(*cache, device, owner.get(), false);
        if constexpr (kBusyHandles) cache->owner_magazines(device).top_idle = idle;  // it is on top
        (void)owner.release();
      } catch (...) {
        depots_.retire_one(device, owner.release());  // no memory for a magazine
      }                                               // (a checked pool has no caches)
      cache->owner_count_leases(-1);
      cache->owner_exit();
      return;
    }
    // Acquire: pairs with close(); a depot it has already trimmed is trimmed again by ~core.
    if (!closed_.load(std::memory_order_acquire)) {
      try {
        if (keep_in_depot(owner.get(), device, false)) (void)owner.release();
      } catch (const DoublePutError &) {
        (void)owner.release();  // checked mode: the pool holds this handle already
      } catch (...) {
      }
    }
    if (owner) depots_.retire_one(device, owner.release());  // what the pool did not take
    settle_leases(-1);                                       // may end the core: the last action
  }

  // The block of an ended shared lease (its handle moved out) goes to the thread's cache, or is
  // deleted.
  void recycle_block(SharedLeaseBlock *block) noexcept {
    bool kept = false;
    if (Cache *cache = enter_own_cache()) {
      kept = keep_spare_block(*cache, block);
      cache->owner_exit();
    }
    if (!kept) delete block;
  }

  void count_leases(std::int64_t delta) noexcept {
    if (Cache *cache = enter_own_cache()) {
      cache->owner_count_leases(delta);
      cache->owner_exit();
    } else {
      settle_leases(delta);
    }
  }

  // The one place that ends the core (see Lifetime in the rationale): at once if the pool's
  // destructor brings the balance to zero, else through the deferred work, since the end destroys
  // handles and the last lease may end on a thread that must not call the driver.
  void settle_leases(std::int64_t delta, bool by_pool = false) noexcept {
    // Acq_rel: the one that reaches zero sees every other user's last use of the core.
    if (lease_balance_.fetch_add(delta, std::memory_order_acq_rel) + delta != 0) return;
    if (by_pool)
      delete this;
    else
      defer(*this);
  }

  // DeferredWork: the end of a core whose last lease ended after its pool.
  void run() noexcept override { delete this; }

  // ---- Spare shared-lease blocks (shared_lease_block.h, spare_block_depot.h) --------------------

  // A spare block for a shared lease that begins in the cache's owner section: one the cache
  // keeps, or else one of a bundle the cache takes from the depot; nullptr if neither has one.
  [[gnu::always_inline]] SharedLeaseBlock *take_spare_block(Cache &cache) noexcept {
    if (SharedLeaseBlock *block = cache.owner_spare_blocks().take()) [[likely]]
      return block;
    return take_spare_bundle(cache.owner_spare_blocks());
  }

  [[gnu::noinline]] SharedLeaseBlock *take_spare_bundle(SpareBlocks<SharedLeaseBlock> &spare) noexcept {
    return spare_block_depot_.take(spare) ? spare.take() : nullptr;
  }

  // Keeps the block of a shared lease that ends in the cache's owner section. A cache whose stack
  // is full hands it to the depot first. False if that found no memory for a bundle: the caller
  // deletes the block.
  [[gnu::always_inline]] bool keep_spare_block(Cache &cache, SharedLeaseBlock *block) noexcept {
    auto &spare = cache.owner_spare_blocks();
    if (spare.keep(block)) [[likely]]
      return true;
    return hand_spare_blocks_over(spare) && spare.keep(block);
  }

  // A cache's spare blocks go to the depot. False, and they stay, if it had no node for them.
  [[gnu::noinline]] bool hand_spare_blocks_over(SpareBlocks<SharedLeaseBlock> &spare) noexcept {
    return spare.count() == 0 || spare_block_depot_.give(spare);
  }

  // ---- The cache: owner side ----------------------------------------------------------------------

  // This thread's cache, its owner section entered; nullptr where there is none to use: a pool
  // without caches, a thread torn down or without memory for one, a cache a purger holds. The
  // caller ends the section with owner_exit().
  [[gnu::always_inline]] Cache *enter_own_cache() noexcept {
    if constexpr (kCached) {
      Cache *cache = this_thread_cache();
      if (cache != nullptr && cache->owner_enter()) [[likely]]
        return cache;
    }
    return nullptr;
  }

  [[gnu::always_inline]] Cache *this_thread_cache() noexcept {
    ThreadCacheDirectory &directory = this_thread_caches;
    if (ThreadCacheLink *hinted = directory.hinted(id_)) [[likely]]
      return static_cast<Cache *>(hinted);
    return find_or_register_cache();
  }

  // Every call that finds no hint for this pool comes here, and makes the fork check through
  // registry(): a hint does not survive fork() (thread_cache_directory.h), so a hit is proof that
  // the check was made in this process. The check is made again once a hint is set
  // (hinted_after_fork_check).
  [[gnu::noinline]] Cache *find_or_register_cache() noexcept {
    Registry &caches = registry();
    // Acquire: pairs with close(). A lease ending after its pool needs no cache.
    if (this_thread_caches.torn_down || closed_.load(std::memory_order_acquire)) return nullptr;
    if (depots_.checker()) return nullptr;  // a checked pool has no caches: every call goes to the checks
    // The id names a pool of this very type, so the cast is exact.
    if (ThreadCacheLink *found = find_thread_cache(id_))
      return hinted_after_fork_check(static_cast<Cache *>(found));
    Cache *cache = nullptr;
    try {
      cache = Cache::create(*this, depots_.device_count());
      auto lock = caches.lock();
      collect_abandoned_caches();
      if (!caches.add(*cache)) {  // a lease ending after its pool: no new cache for a dead pool
        Cache::destroy(cache);
        return nullptr;
      }
    } catch (const std::bad_alloc &) {
      if (cache != nullptr) Cache::destroy(cache);
      return nullptr;
    }
    if (add_thread_cache(id_, cache)) return hinted_after_fork_check(cache);
    cache->on_thread_exit();  // registered, but the thread cannot find it: abandon it at once
    return nullptr;
  }

  // A fork() made from a signal handler between the lookup's first check and its setting the hint
  // leaves the child with a hint and parent's handles: the second check forgets them, so that
  // later hits are sound (this very call may still use the cache as the parent left it).
  Cache *hinted_after_fork_check(Cache *cache) noexcept {
    forget_handles_of_parent_process();
    return cache;
  }

  // Loaded is empty (or absent): swap in a full previous, or trade for a filled depot magazine.
  bool refill_cache(typename Cache::DeviceMagazines &magazines, int device) noexcept {
    // What comes back to the top is asked again (thread_cache.h, top_idle).
    if constexpr (kBusyHandles) magazines.top_idle = false;
    if (!magazines.previous.empty()) {
      std::swap(magazines.loaded, magazines.previous);
      return true;
    }
    Depots &store = depots();
    const std::uint32_t filled = store.take_filled(device);
    if (filled == kNilIndex) return false;
    magazines.count_trade();
    // Both held magazines are empty (or absent): keep one as `previous`, give the other back.
    if (magazines.previous.held()) store.return_empty(magazines.previous, device);
    const Slot loaded = magazines.previous.handing_gets_to(store.slot_of(filled));
    magazines.previous = magazines.loaded;
    magazines.loaded = loaded;
    return true;
  }

  [[gnu::always_inline]] void put_into_cache(Cache &cache, int device, handle_type handle, bool adopted) {
    auto &magazines = cache.owner_magazines(device);
    if (!magazines.has_room()) [[unlikely]]
      make_room_in_cache(magazines, device);
    file_in_loaded(magazines, handle, adopted);
  }

  // A Put into the loaded magazine, which has room, counted.
  [[gnu::always_inline]] static void file_in_loaded(typename Cache::DeviceMagazines &magazines,
                                                    handle_type handle, bool adopted) noexcept {
    magazines.loaded.put(handle);
    if constexpr (kBusyHandles) magazines.top_idle = false;
    magazines.counts.count_put(adopted);
  }

  // Loaded is filled to the cache's fill limit (or absent): swap in an empty previous, or deposit
  // a full magazine (retiring its handles over the idle limit) and load an empty one. Throws only
  // before changing anything (no empty magazine to be had).
  [[gnu::noinline]] void make_room_in_cache(typename Cache::DeviceMagazines &magazines, int device) {
    if (magazines.previous.held() && magazines.previous.empty()) {
      std::swap(magazines.loaded, magazines.previous);
      return;
    }
    Depots &store = depots();
    const Slot fresh = store.slot_of(store.take_empty(device));
    if (!magazines.loaded.held()) {
      magazines.loaded = magazines.loaded.handing_gets_to(fresh);
      return;
    }
    if (magazines.previous.held()) {
      if (!store.deposit(magazines.previous, device)) {
        // Nothing fits under the idle limit: the previous magazine, now emptied, is reused. Not
        // a trade: a thread that feeds a full depot must not grow what it retires at a time.
        store.give_back_empty(device, fresh.index);
        std::swap(magazines.loaded, magazines.previous);
        return;
      }
      magazines.count_trade();
    }
    const Slot loaded = magazines.previous.handing_gets_to(fresh);
    magazines.previous = magazines.loaded;
    magazines.loaded = loaded;
  }

  // Every magazine goes to its depot (filled, or empty; what does not fit under the limit is
  // retired), and the cache holds none. By the owner (a flush, or at exit), or by a purger. No
  // fork check of its own: a purger calls it under the registry's lock, which the check's
  // forgetting resets; each caller has made the check.
  void return_magazines(Cache &cache) noexcept {
    for_each_magazine(cache, [this](Slot &slot, int device) {
      depots_.return_magazine(slot, device);
      slot.clear();
    });
  }

  // ---- The caches: purger side (under the registry's lock) ----------------------------------------

  // Empties every cache: destroys their handles, or moves them to the depots if `keep_handles`.
  // Leaves every cache requested (bypassed); the caller reopens them.
  void drain_caches(bool keep_handles) noexcept {
    collect_abandoned_caches();
    registry_.quiesce(Cache::kDraining, [&](Cache &cache) {
      for_each_magazine(cache, [&](Slot &slot, int device) {
        if (!keep_handles || !depots_.exchange_for_empty(slot, device)) depots_.destroy_handles(slot, device);
      });
      // What the thread's flow taught the cache is forgotten with its handles: a thread that
      // still trades often grows its magazines again within a few trades.
      for (int device = 0; device < cache.device_count(); ++device)
        cache.purger_magazines(device).restart_growth();
    });
  }

  // Collects the caches of exited threads: what they still hold goes to the depots, their call
  // counts are folded into the shared ones (the registry retires their lease counts). Here rather than in the
  // thread's exit flush, which a Purge in progress makes the exiting thread skip.
  void collect_abandoned_caches() noexcept {
    registry_.collect_abandoned([this](Cache &cache) {
      return_contents_of_leaving_cache(cache);
      fold_counts(cache);
    });
  }

  // A cache whose thread is gone or going (by the owner at exit, or by the purger that collects
  // it): its magazines go to the depots, its spare blocks to the spare block depot.
  void return_contents_of_leaving_cache(Cache &cache) noexcept {
    return_magazines(cache);
    (void)hand_spare_blocks_over(cache.purger_spare_blocks());
  }

  template <class Visit>
  static void for_each_magazine(Cache &cache, Visit &&visit) noexcept {
    for (int device = 0; device < cache.device_count(); ++device) {
      auto &magazines = cache.purger_magazines(device);
      for (Slot *slot : {&magazines.loaded, &magazines.previous})
        if (slot->held()) visit(*slot, device);
    }
  }

  // A cache that is going away (collected, or closed with the pool) hands its counts to the
  // shared ones.
  void fold_counts(Cache &cache) noexcept {
    if constexpr (kCountCalls)
      for (int device = 0; device < depots_.device_count(); ++device) {
        auto &magazines = cache.purger_magazines(device);
        depots_.counts(device).fold_in(magazines.gets(), magazines.counts);
      }
  }

  // ---- Arguments -----------------------------------------------------------------------------

  [[gnu::always_inline]] int resolve_device(int device_id, const char *operation) const {
    const int device = device_id == -1 ? depots_.backend().current_device() : device_id;
    depots_.check_device(device, operation);
    return device;
  }

  [[gnu::always_inline]] int device_for_put(const owner_type &owner, int device_id) const {
    int recorded = owner.device_id();
    // An adopted handle (no device recorded) is asked, where the backend can ask it (streams).
    if constexpr (DeviceQueryingBackend<Backend>)
      if (recorded == -1) recorded = depots_.backend().query_device(owner.get());
    if (device_id == -1) return resolve_device(recorded, "Put");
    depots_.check_device(device_id, "Put");
    if (recorded != -1 && recorded != device_id) [[unlikely]]
      throw_contradicting_device(recorded, device_id);
    return device_id;
  }

  // `patience` from now, saturated at the clock's end. Throws std::invalid_argument for a negative
  // one, before anything is taken.
  static Deadline deadline_after(std::chrono::nanoseconds patience, const char *operation) {
    if (patience < std::chrono::nanoseconds::zero())
      throw std::invalid_argument(std::string("evpool: ") + operation + " with a negative patience (" +
                                  std::to_string(patience.count()) + " ns)");
    const auto now = std::chrono::steady_clock::now();
    const auto room = std::chrono::steady_clock::time_point::max() - now;
    return Deadline{patience >= room
                        ? std::chrono::steady_clock::time_point::max()
                        : now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(patience),
                    patience, operation};
  }

  // The device's handles held out of the pool's reach in this process (got or leased and not
  // handed back, or idle in a thread's cache): those counted under the cap that the pool does not
  // hold. A snapshot of moving figures, for the errors at the cap.
  std::uint64_t held_out(int device) const noexcept {
    const std::uint64_t kept = depots_.kept(device);
    const std::uint64_t in_pool = depots_.idle(device) + depots_.retired(device) + depots_.set_aside(device);
    return kept > in_pool ? kept - in_pool : 0;
  }

  std::string describe_cap(int device) const {
    const std::string noun = handle_noun<Backend>();
    return "the pool keeps its cap of " + std::to_string(depots_.max_kept()) + " " + noun + "s of device " +
           std::to_string(device) + ": " + std::to_string(held_out(device)) +
           " held in this process (got or leased and not handed back, or idle in a thread's cache), " +
           std::to_string(depots_.set_aside(device)) + " busy, " + std::to_string(depots_.retired(device)) +
           " retired, " + std::to_string(depots_.idle(device)) + " idle in the depot";
  }

  [[noreturn, gnu::cold, gnu::noinline]] void throw_no_idle_within(int device, const Deadline &deadline) const {
    throw CapReachedError("evpool: " + std::string(deadline.operation) + " found no " + handle_noun<Backend>() +
                              " of device " + std::to_string(device) + " idle within " +
                              std::to_string(deadline.patience.count()) + " ns: " + describe_cap(device),
                          device, depots_.max_kept(), held_out(device));
  }

  [[noreturn, gnu::cold, gnu::noinline]] void throw_put_at_cap(int device) const {
    const std::string noun = handle_noun<Backend>();
    const std::string a_noun = (noun == "event" ? "an " : "a ") + noun;
    throw CapReachedError("evpool: Put of " + a_noun + " the pool did not hand out refused: " +
                              describe_cap(device) + "; the caller still owns the " + noun,
                          device, depots_.max_kept(), held_out(device));
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void throw_empty_put() {
    throw std::invalid_argument(std::string("evpool: Put of an empty ") + handle_noun<Backend>());
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void throw_contradicting_device(int recorded, int device_id) {
    const std::string noun = handle_noun<Backend>();
    throw std::invalid_argument("evpool: Put of " + std::string(noun == "event" ? "an " : "a ") + noun +
                                " of device " + std::to_string(recorded) + " under device " +
                                std::to_string(device_id) + "; the caller still owns the " + noun);
  }

  const std::uint64_t id_ = next_pool_id();
  ForkGuard fork_guard_;
  Depots depots_;
  SpareBlockDepot<SharedLeaseBlock, Policy::template atomic, Stack, Policy::depot_stripes> spare_block_depot_;

  // Leases, and the end of the pool (see the rationale).
  alignas(kFalseSharingRange) atomic<std::int64_t> lease_balance_{kLeaseBias};
  atomic<bool> closed_{false};

  // Gets waiting at the cap, of any device, and the cache flushes begun for them (written under the
  // registry lock): wait_at_cap. Touched only by Gets at the cap.
  alignas(kFalseSharingRange) atomic<std::uint32_t> waiting_at_cap_{0};
  atomic<std::uint64_t> cache_flushes_{0};

  Registry registry_;
};

}  // namespace evpool::detail
