// evpool: one thread's cache of idle events for one pool, and the protocol that lets other threads
// empty it. Private to the library.
//
// Design rationale
// ----------------
// The magazine layer of Bonwick and Adams (illumos kmem.c), per thread instead of per CPU: for each
// device the cache holds a `loaded` and a `previous` magazine (depot.h). Get takes from `loaded`;
// when it is empty and `previous` is full the two swap; when both are empty a filled magazine comes
// from the depot. Put mirrors it. So a thread touches shared memory at most once every Capacity
// operations, and alternating Get/Put at a magazine boundary cannot thrash the depot (the two
// magazines absorb it). Every Get and Put from the cache is a load, a store and a compare: no
// atomic read-modify-write, no full fence.
//
// Magazine size. kmem.c grows a cache's magazines when its depot lock is contended, so that busy
// caches go to the depot less often. Here the cost of a trade is not a lock but the cross-core
// transfers of the depot's lines (about five per magazine, 680 ns for one producer and consumer
// pair on the H200 host, contended or not), so what grows a cache's magazines is trading itself:
// each device's entry starts filling its magazines to Pool::kCacheStartCapacity events and
// doubles that after every Pool::kCacheGrowthTrades trades, up to the magazines' capacity. A
// trade is a magazine with events crossing between the cache and the depot: a filled one taken
// (a Get that found both magazines empty) or handed over (a Put that found both full, and the
// depot took some of its events; one whose events the idle limit destroyed all is not a trade, so
// that a thread feeding a full depot does not grow what it destroys at a time). A thread whose
// Gets and Puts balance within two magazines never trades, and its own Puts fill to the start; a
// completion thread of a pipeline, which hands over every magazine it fills, soon fills them
// whole. The fill limit rules Puts only: a Get takes what a magazine holds, and a magazine taken
// from the depot comes as full as its giver made it (up to the capacity; Reserve fills to the
// start), so a cache holds at most 2 x Pool::kCacheCapacity events per device. Reading the limit
// costs a Put one load, from the line it writes anyway. A purger that empties the cache (Purge,
// Trim) also restarts its growth.
//
// Who may touch a cache. The owner thread, on every call, and a purger (Purge, Trim, the pool's
// destructor, the collection of an exited thread's cache), rarely, under the pool's registry lock.
// They exclude each other with two words, Dekker style, the owner's side made cheap by an
// asymmetric fence (asymmetric_fence.h):
//
//   owner (owner_enter/owner_exit)           purger (purger_request/purger_wait_until_idle/...)
//   busy = 1                                 bypass = kDraining or kClosed
//   light fence (compiler barrier)           heavy fence (membarrier)
//   if bypass != kOpen: busy = 0, go around  while busy: wait
//   ... use the magazines ...                ... use the magazines ...
//   busy = 0 (release)                       bypass = open (release), unless closed
//
// "Open" is kOpen where membarrier works. Where it does not (asymmetric_fence.h), it is
// kOpenFenced: the owner's fast test fails, and its slow path makes the full fence the light one
// could not stand in for and loads `bypass` again, so the fast path itself never tests for the
// fallback.
//
// Either the owner sees `bypass` and does not touch its magazines (it goes to the depot directly
// instead, or, for a closed pool, destroys what it returns), or the purger sees `busy` and waits for
// the owner's current call to end. The waiting is the price: a purger may wait for a thread that is
// in the middle of one Get or Put on this pool (a few dozen instructions, unless that thread is
// descheduled right there). It never waits for an idle thread, asleep or not: an idle owner has
// busy == 0, so its cache is emptied under its feet, which jemalloc's tcache cannot do.
//
// Lifetime. The cache is owned jointly by its thread (through the thread's directory,
// thread_cache_directory.h) and its pool (through the pool's registry); `owners` counts the two,
// and whoever lets go last deletes it. A thread that exits flushes its magazines to the depot and
// lets go; the pool collects the cache under its registry lock. A pool that is destroyed closes the
// cache (bypass = kClosed, for good) and lets go; the thread drops it when it next looks it up, or
// when it exits. Neither waits for the other.
//
// Leases. `leases` counts the leases this thread began minus those it ended, for this pool; a
// lease may end on another thread, so single counts go negative, and only the sum over every cache
// (plus what the pool keeps for exited threads and bypassing calls) means anything. The owner
// writes it with a plain load and store; readers read it only once the cache is quiescent.
//
// Layout (one allocation, in 128-byte lines; x86-64 with one device: 640 bytes):
//
//   [0, 128)     the vtable pointer (ThreadCacheLink), read-only
//   [128, 384)   busy, bypass, leases, device count, and the spare lease blocks (a count and 16
//                pointers): the owner writes busy (and leases, and the spare blocks) on every
//                call, a purger writes bypass rarely
//   [384, 512)   owners, abandoned, the pool, the registry link: written a few times in the
//                cache's life
//   [512, ...)   the magazine table, one 64-byte DeviceMagazines per device (two 24-byte slots,
//                the count of adopted Puts, the fill limit, the trades, top_idle and the Gets
//                until the next look at the retired handles), written by the owner on every
//                call; rounded up to whole lines
//
// The table lies behind the object, as LLVM's TrailingObjects lays out its trailing arrays, so the
// fast path finds a device's slots at a constant offset from the cache. Nothing another thread
// writes often shares a line with what the owner writes.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/call_counts.h"
#include "evpool/detail/magazine_slot.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/shared_lease_block.h"
#include "evpool/detail/thread_cache_directory.h"

namespace evpool::detail {

/// `Pool` provides `Magazine`, `SharedLeaseBlock`, `atomic<T>`, `Fence`, `spin_wait()`,
/// `flush_exiting_cache(ThreadCache &)`, and the magazine sizes `kCacheCapacity`,
/// `kCacheStartCapacity`, `kCacheGrowthTrades`.
template <class Pool>
class ThreadCache final : public ThreadCacheLink {
 public:
  using Magazine = typename Pool::Magazine;
  template <class T>
  using Atomic = typename Pool::template atomic<T>;
  using Fence = typename Pool::Fence;

  /// The purger's word. kOpen and kOpenFenced both leave the cache to its owner; which one is the
  /// process's "open" state is settled once, by Fence::owners_fence_fully().
  enum Bypass : std::uint32_t { kOpen = 0, kDraining = 1, kClosed = 2, kOpenFenced = 3 };

  using Slot = MagazineSlot<Magazine, Pool::kCountCalls>;
  static_assert(sizeof(Slot) == 24, "two slots and the counts fill a DeviceMagazines");
  using CallCounts = std::conditional_t<Pool::kCountCalls, CachedCallCounts, NoCallCounts>;
  /// A device's magazines, the adopted Puts it took (call_counts.h) and how full it fills its
  /// magazines, side by side: the owner writes them on the same line.
  struct alignas(64) DeviceMagazines {
    Slot loaded, previous;
    [[no_unique_address]] CallCounts counts;
    /// Puts fill the loaded magazine up to here (a magazine from the depot may hold more, up to
    /// Pool::kCacheCapacity: it then counts as full). See "Magazine size" above.
    std::uint32_t fill_limit = Pool::kCacheStartCapacity;
    std::uint16_t trades = 0;  // since fill_limit last grew
    /// Pools of busy handles (streams): the handle on top of `loaded` came back known idle (its
    /// holder synchronised it and enqueued nothing since: UniqueLease::reset_known_idle), and
    /// nothing has touched `loaded` since, so the next Get may hand it out without asking. Every
    /// other Put into the cache and every Get from it clears it, and so does every refill of
    /// `loaded`: a handle can leave the cache (a flush, a purger) and come back with a refill,
    /// its holder in between having left work on it. A purger needs no clear of its own: one that
    /// empties the cache leaves `loaded` empty, so the owner's next Get refills first and its
    /// next hand-back writes the flag anew; one that only reads (stats()) leaves the top as it
    /// was. Written only inside the owner's sections, and reset with the whole entry in a fork
    /// child (forget_in_child); no purger reads it.
    bool top_idle = false;
    /// Gets served here until the next looks at the device's retired handles (wrapping: every
    /// 256th Get; HandlePoolCore::obtain_and_look). Only the owner reads and writes it.
    std::uint8_t gets_until_look = 0;

    std::uint64_t gets() const noexcept { return loaded.gets() + previous.gets(); }
    /// Whether a Put may go into the loaded magazine: one is held, filled below the limit.
    bool has_room() const noexcept { return loaded.held() && loaded.count() < fill_limit; }
    /// A magazine was traded with the depot: every Pool::kCacheGrowthTrades trades the fill
    /// limit doubles, up to the magazines' capacity.
    void count_trade() noexcept {
      if (++trades < Pool::kCacheGrowthTrades) return;
      trades = 0;
      fill_limit = std::min(2 * fill_limit, Pool::kCacheCapacity);
    }
    /// The fill limit goes back to where it started (a purger, which has emptied the magazines).
    void restart_growth() noexcept {
      fill_limit = Pool::kCacheStartCapacity;
      trades = 0;
    }
  };
  static_assert(sizeof(DeviceMagazines) == 64, "a device's entry is half a line: none straddles two");
  static_assert(Pool::kCacheGrowthTrades <= 0xffff, "DeviceMagazines::trades counts up to it in 16 bits");

  /// A cache for `devices` devices. Its magazine table is allocated with it, right behind the
  /// object, so the fast path reaches a device's slots at a fixed offset from the cache instead of
  /// through a pointer loaded first. Throws std::bad_alloc.
  static ThreadCache *create(Pool &pool, int devices) {
    // The table starts on a line of its own, behind the cold members: the owner's writes to it
    // never share a line with another thread's writes.
    static_assert(sizeof(ThreadCache) % kFalseSharingRange == 0);
    static_assert(sizeof(void *) != 8 || kFalseSharingRange != 128 || sizeof(ThreadCache) == 512,
                  "the layout drawn at the top of this file");
    static_assert(alignof(ThreadCache) % alignof(DeviceMagazines) == 0);
    void *memory = ::operator new (bytes_for(devices), std::align_val_t{alignof(ThreadCache)});
    auto *cache = ::new (memory) ThreadCache(pool, devices);
    std::uninitialized_value_construct_n(cache->magazine_table(), devices);
    return cache;
  }
  /// Frees a cache that no thread and no pool can reach any more.
  static void destroy(ThreadCache *cache) noexcept {
    // The table's objects are trivially destructible; the cache is destroyed, then its memory.
    static_assert(std::is_trivially_destructible_v<DeviceMagazines>);
    cache->~ThreadCache();
    ::operator delete (cache, std::align_val_t{alignof(ThreadCache)});
  }

  // ---- Owner side: only the thread whose directory holds the cache ----------------------------

  /// Announces a call. False: a purger holds the cache (or the pool is closed); do not touch it.
  [[gnu::always_inline]] bool owner_enter() noexcept {
    Fence::announce(busy_);
    // Seq_cst: the load half of the Dekker pair (plain on x86, ldar on Arm). On the success path
    // it also acquires the purger's release of the open state, so the owner sees what the purger
    // did.
    const std::uint32_t state = bypass_.load(std::memory_order_seq_cst);
    if (state == kOpen) [[likely]]
      return true;
    return owner_enter_fenced(state);
  }
  /// owner_enter found the cache not kOpen: with no asymmetric fence, a full one, then the test
  /// again; otherwise (a purger holds the cache) the call goes around it.
  [[gnu::noinline]] bool owner_enter_fenced(std::uint32_t state) noexcept {
    if (state == kOpenFenced) {
      Fence::owner_full_fence();  // the owner's half, made in full
      // Seq_cst, as above; after the fence, this load is the one the pair relies on.
      if (bypass_.load(std::memory_order_seq_cst) == kOpenFenced) return true;
    }
    owner_exit();
    return false;
  }
  /// Ends the call. Release: a purger that sees busy == 0 sees everything the call did.
  void owner_exit() noexcept { busy_.store(0, std::memory_order_release); }

  [[gnu::always_inline]] DeviceMagazines &owner_magazines(int device) noexcept {
    return magazine_table()[device];
  }

  void owner_count_leases(std::int64_t delta) noexcept {
    // Relaxed load and store, no read-modify-write: only the owner writes the count.
    leases_.store(leases_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }

  /// The spare blocks of shared leases this thread ended (shared_lease_block.h).
  SpareBlocks<typename Pool::SharedLeaseBlock> &owner_spare_blocks() noexcept { return spare_blocks_; }

  /// Whether the pool has closed the cache for good (the owner then returns events by itself).
  bool closed() const noexcept { return bypass_.load(std::memory_order_acquire) == kClosed; }

  // ---- Purger side: under the pool's registry lock ---------------------------------------------

  /// Step 1: every later owner_enter fails. Seq_cst: the store half of the Dekker pair; follow it
  /// with Fence::purger_fence() before waiting.
  void purger_request(Bypass state) noexcept { bypass_.store(state, std::memory_order_seq_cst); }

  /// Step 2: waits for the owner's call in progress, if any, to end. Seq_cst (acquire at least):
  /// pairs with owner_exit, so the purger sees the magazines as the owner left them.
  void purger_wait_until_idle() noexcept {
    while (busy_.load(std::memory_order_seq_cst) != 0) Pool::spin_wait();
  }

  DeviceMagazines &purger_magazines(int device) noexcept { return magazine_table()[device]; }
  SpareBlocks<typename Pool::SharedLeaseBlock> &purger_spare_blocks() noexcept { return spare_blocks_; }
  int device_count() const noexcept { return device_count_; }
  std::int64_t purger_leases() const noexcept { return leases_.load(std::memory_order_relaxed); }

  /// Step 3: the owner may use its cache again. Release: its next owner_enter sees our changes.
  void purger_reopen() noexcept { bypass_.store(open_state(), std::memory_order_release); }

  /// Whether the owner thread has exited (its last use of the cache happened before).
  bool abandoned() const noexcept { return abandoned_.load(std::memory_order_acquire); }

  /// In a fork() child, where the owner may not exist: forget the magazines (their events are the
  /// parent's; the nodes stay with the arena), hand the lease count to the caller, and make the
  /// cache usable again. Only the child's single forgetting thread runs this.
  std::int64_t forget_in_child() noexcept {
    for (int device = 0; device < device_count_; ++device) magazine_table()[device] = DeviceMagazines{};
    const std::int64_t leases = leases_.load(std::memory_order_relaxed);
    leases_.store(0, std::memory_order_relaxed);
    busy_.store(0, std::memory_order_relaxed);
    bypass_.store(open_state(), std::memory_order_relaxed);
    return leases;
  }

  // ---- Either owner ------------------------------------------------------------------------------

  /// The thread or the pool lets go; the last one deletes the cache.
  void let_go() noexcept {
    // Acq_rel: the deleter sees every use of the cache by the other owner.
    if (owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) destroy(this);
  }

  // ThreadCacheLink: called by the thread's directory.
  void on_thread_exit() noexcept override {
    if (owner_enter()) {
      pool_.flush_exiting_cache(*this);
      owner_exit();
    }
    // Release: the pool's collection of the cache sees the flush and the final lease count.
    abandoned_.store(true, std::memory_order_release);
    let_go();
  }
  bool stale() const noexcept override { return closed(); }
  void drop() noexcept override { let_go(); }

  /// The pool's registry of caches links them through here (cache_registry.h); under its lock.
  std::atomic<ThreadCache *> &registry_next() noexcept { return registry_next_; }

 private:
  ThreadCache(Pool &pool, int devices) : device_count_(devices), pool_(pool) {}
  ~ThreadCache() = default;

  static Bypass open_state() noexcept { return Fence::owners_fence_fully() ? kOpenFenced : kOpen; }

  // Rounded up to whole lines, so that the next allocation never shares the table's last line.
  static std::size_t bytes_for(int devices) noexcept {
    const std::size_t bytes = sizeof(ThreadCache) + sizeof(DeviceMagazines) * static_cast<std::size_t>(devices);
    return (bytes + kFalseSharingRange - 1) / kFalseSharingRange * kFalseSharingRange;
  }
  [[gnu::always_inline]] DeviceMagazines *magazine_table() noexcept {
    return std::launder(
        reinterpret_cast<DeviceMagazines *>(reinterpret_cast<std::byte *>(this) + sizeof(ThreadCache)));
  }
  // Hot: the owner writes busy_ (and leases_) on every call, the purger writes bypass_ rarely.
  alignas(kFalseSharingRange) Atomic<std::uint32_t> busy_{0};
  Atomic<std::uint32_t> bypass_{open_state()};
  Atomic<std::int64_t> leases_{0};
  int device_count_;
  SpareBlocks<typename Pool::SharedLeaseBlock> spare_blocks_;  // as the magazines; deleted with the cache
  // Cold: written once or twice in the cache's life, or under the registry lock, and outside the
  // owner/purger protocol, so std::atomic rather than the policy's (the deterministic scheduler
  // need not interleave them; cache_registry_test.cc drives the registry's stores itself).
  alignas(kFalseSharingRange) std::atomic<std::uint32_t> owners_{2};
  std::atomic<bool> abandoned_{false};
  Pool &pool_;
  std::atomic<ThreadCache *> registry_next_{nullptr};
};

}  // namespace evpool::detail
