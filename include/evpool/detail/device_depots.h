// evpool: a pool's per-device depots and every event they own: the one place where events are
// created, counted and destroyed. Private to the library.
//
// Design rationale
// ----------------
// The lower layer of the magazine design (handle_pool_core.h has the whole picture): for each
// device a Depot (depot.h) of filled and empty magazines, nodes of one arena (node_arena.h), under
// one idle limit. Whatever leaves the pool for good leaves through destroy(): the backend's
// destroy, the destroyed counter and checked mode's forgetting go together there, so that no
// route destroys an event and forgets one of the three.
//
// Only calls that may call the driver destroy: Trim, Purge, the pool's end, and a Get off its fast
// path (a few retired events that demand has shown surplus, at most). What a Put or the end of a
// lease cannot keep is retired instead (retired_handles.h says where retired events go, when they
// are surplus, and the bound on them).
//
// Handles that can be busy (streams: BusyHandleBackend) add a third place per device, the busy
// ones set aside: a Get that looks for an idle handle in the depot moves every busy one it meets
// there into it, so the depot's top never fills up with busy handles that hide idle ones below
// them, and a Get that finds the depot empty sweeps it (take_idle). So a Get creates only after
// every handle in the depot, set aside or retired was found busy (docs/streams.md, "The bound").
// Set-aside handles belong to the pool as idle ones do; they do not count against the idle limit,
// since each of them has work in flight, which is what bounds them. One Get sweeps them at a time,
// and a sweep serves every Get that waits for it (sweep_set_aside): W Gets that find the depot
// empty together ask the set-aside handles once, not W times.
//
// Magazines move between a thread cache and a depot with these verbs, each named for what the
// depot ends up holding:
//
//   deposit(slot)             the magazine's events join the depot (those over the limit are
//                             retired); false if none fit, and the slot keeps the magazine
//   return_magazine(slot)     the magazine goes back, filled or empty, as deposit decides
//   return_empty(slot)        the magazine goes back empty (its events were taken or destroyed)
//   exchange_for_empty(slot)  deposit, with an empty magazine left in the slot in exchange
//
// The caller holds the slot (a cache's owner, or a purger that quiesced the cache); the depot's
// stacks publish a magazine's contents from one holder to the next (depot.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "evpool/detail/call_counts.h"
#include "evpool/detail/depot.h"
#include "evpool/detail/device_ordinal.h"
#include "evpool/detail/handle_checker.h"
#include "evpool/detail/handle_noun.h"
#include "evpool/detail/magazine_slot.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/retired_handles.h"
#include "evpool/detail/tagged_index_stack.h"
#include "evpool/handle_backend.h"
#include "evpool/pool_checks.h"

namespace evpool::detail {

/// What a caller that looks for an idle handle again and again (a Get waiting at the cap) saw of
/// the sweeps of the set-aside handles at its last look: a sweep whose number reaches
/// `begun_after` began after that look (DeviceDepots::take_idle).
struct SweepTicket {
  std::uint64_t begun_after = ~std::uint64_t{0};  // no look yet: no sweep counts
};

/// A device's word of sweeps of its set-aside handles (DeviceDepots::sweep_set_aside):
///
///    63                                     2      1          0
///   +----------------------------------------+----------+---------+
///   | sweeps finished                        | all busy | running |
///   +----------------------------------------+----------+---------+
///
/// `running`: a sweep or a tidy (tidy_set_aside) holds the set-aside handles. `all busy`: the last
/// sweep finished found every handle it asked busy (kept while the next runs, and through tidies
/// that find none idle). Only sweeps are counted. 62 bits of sweeps never wrap.
struct SweepWord {
  static constexpr std::uint64_t kRunning = 1, kAllBusy = 2;
  static bool running(std::uint64_t word) noexcept { return (word & kRunning) != 0; }
  static bool all_busy(std::uint64_t word) noexcept { return (word & kAllBusy) != 0; }
  static std::uint64_t finished(std::uint64_t word) noexcept { return word >> 2; }
  /// The word once the sweep that `running` shows running has ended with its verdict.
  static std::uint64_t ended(std::uint64_t running, bool all_busy) noexcept {
    return (finished(running) + 1) << 2 | (all_busy ? kAllBusy : 0);
  }
  /// The number of finished sweeps at which one that begins after `word` was read has ended.
  static std::uint64_t next_to_begin(std::uint64_t word) noexcept {
    return finished(word) + (running(word) ? 2 : 1);
  }
};

/// Thread-safety: every member may be called by any number of threads at once, except the
/// constructor, forget_all_in_child() (a fork child's one forgetting thread) and what a member says.
/// Progress: lock-free, except where the backend creates or destroys (the driver may block), where
/// the arena grows (it allocates), and where a Get that found the depot empty waits for another's
/// sweep or tidy of the set-aside handles to end (it holds them out: a stalled sweeper stalls it).
template <HandleBackend Backend, class Policy, class Magazine>
class DeviceDepots {
 public:
  using handle_type = typename Backend::handle_type;
  using options_type = typename Backend::options_type;
  using Slot = MagazineSlot<Magazine, Policy::count_calls>;
  using Arena = NodeArena<Magazine, Policy::template atomic>;
  using Stack = TaggedIndexStack<Policy::template atomic, Policy::tag_bits, typename Policy::backoff>;
  using Depot = detail::Depot<Magazine, Policy, Stack>;
  using Retired = RetiredHandles<Magazine, Stack, Policy::template atomic>;
  static constexpr bool kCountCalls = Policy::count_calls;

  /// Throws std::invalid_argument for options the backend rejects, no device, an idle limit of 0,
  /// or a cap (`max_per_device`) of 0; std::bad_alloc.
  DeviceDepots(Backend backend, options_type options, std::size_t max_idle_per_device, Checks checks,
               std::size_t max_per_device = kUnlimitedKept)
      : backend_(std::move(backend)), options_(std::move(options)), max_idle_(max_idle_per_device),
        max_kept_(max_per_device) {
    backend_.validate_options(options_);
    device_count_ = backend_.device_count();
    if (device_count_ <= 0)
      throw std::invalid_argument("evpool: the backend reports " + std::to_string(device_count_) +
                                  " devices; a pool needs at least one");
    if (max_idle_ == 0)
      throw std::invalid_argument(std::string("evpool: an idle limit of 0 would destroy every ") +
                                  handle_noun<Backend>() + " put back; use kUnlimitedIdle for no limit");
    if (max_kept_ == 0)
      throw std::invalid_argument("evpool: a cap of 0 per device would let Get create nothing; "
                                  "use kUnlimitedKept for no cap");
    depots_ = std::make_unique<Depot[]>(static_cast<std::size_t>(device_count_));
    retired_ = std::make_unique<Retired[]>(static_cast<std::size_t>(device_count_));
    set_aside_ = std::make_unique<Retired[]>(static_cast<std::size_t>(device_count_));
    sweeps_ =
        std::make_unique<CacheLinePadded<std::atomic<std::uint64_t>>[]>(static_cast<std::size_t>(device_count_));
    kept_ =
        std::make_unique<CacheLinePadded<std::atomic<std::uint64_t>>[]>(static_cast<std::size_t>(device_count_));
    if constexpr (kCountCalls)
      counts_ = std::make_unique<SharedCallCounts[]>(static_cast<std::size_t>(device_count_));
    if (checks == Checks::kOn || checks_requested_by_environment())
      checker_ = std::make_unique<HandleChecker<handle_type>>(handle_noun<Backend>());
  }
  DeviceDepots(const DeviceDepots &) = delete;
  DeviceDepots &operator=(const DeviceDepots &) = delete;

  Backend &backend() noexcept { return backend_; }
  const Backend &backend() const noexcept { return backend_; }
  int device_count() const noexcept { return device_count_; }
  const options_type &options() const noexcept { return options_; }
  std::size_t max_idle() const noexcept { return max_idle_; }
  std::size_t max_kept() const noexcept { return max_kept_; }
  bool capped() const noexcept { return max_kept_ != kUnlimitedKept; }
  std::size_t node_count() const noexcept { return arena_.allocated(); }
  /// Checked mode's records (pool_checks.h), or nullptr.
  HandleChecker<handle_type> *checker() noexcept { return checker_.get(); }
  const HandleChecker<handle_type> *checker() const noexcept { return checker_.get(); }
  /// The device's shared counters; only with Policy::count_calls.
  SharedCallCounts &counts(int device) noexcept { return counts_[device]; }
  const SharedCallCounts &counts(int device) const noexcept { return counts_[device]; }

  /// Throws std::out_of_range naming the operation, the ordinal and the device count.
  void check_device(int device, const char *operation) const {
    check_device_ordinal(device, device_count_, operation);
  }

  // ---- Events in and out -----------------------------------------------------------------------

  // ---- The cap (pool_cap.h) ------------------------------------------------------------------------
  //
  // kept_[device] counts the handles of the device that exist through the pool: those it created
  // or took in from outside (take_in_within_cap), less those it destroyed or let go (a lease's
  // release()). A handle handed out stays counted until it is destroyed or let go, so the count
  // is idle + set aside + retired + handed out, and Gets and Puts of the pool's own handles never
  // change it: it is written only where a handle is created, destroyed, let go or taken in, each a
  // driver call or a rare call, never on a Get or Put (the fast path writes no shared word).
  // Relaxed everywhere: the count bounds, and orders nothing; a compare-exchange takes a place
  // before the handle exists, so concurrent creators never pass the cap together.

  /// A new handle of the device, counted, if the device keeps fewer than the cap; else nothing,
  /// and false. Throws what the backend throws; then nothing changed.
  bool create_within_cap(int device, handle_type &out) {
    const bool counted = capped();
    if (counted && !take_place(device)) return false;
    try {
      out = backend_.create(options_, device);
    } catch (...) {
      if (counted) release_place(device);
      throw;
    }
    if constexpr (kCountCalls) counts_[device].count_created(1);
    return true;
  }

  /// A handle from outside the pool (one it did not hand out) is to be taken in: takes its place
  /// under the cap; false at the cap (the caller refuses it). Always true without a cap.
  bool take_in_within_cap(int device) noexcept { return !capped() || take_place(device); }
  /// Undoes take_in_within_cap for a handle that was not taken in after all (its Put threw).
  void undo_take_in(int device) noexcept {
    if (capped()) release_place(device);
  }
  /// A handle the pool handed out leaves it for good without being destroyed (UniqueLease::release).
  void let_go(int device) noexcept {
    if (capped()) release_place(device);
  }
  /// The handles of the device that exist through the pool (see above); 0 without a cap, where
  /// nothing counts them.
  std::uint64_t kept(int device) const noexcept {
    return kept_[device].value.load(std::memory_order_relaxed);
  }

  /// The one way an event leaves the pool for good (see the rationale).
  void destroy(int device, handle_type handle) noexcept {
    // Checked mode forgets it first: once the backend destroys it, the driver may hand the same
    // value to another thread's create at once (rmm#649), whose record a later erase would remove.
    if (checker_) checker_->on_destroyed(handle);
    backend_.destroy(handle);
    if (capped()) release_place(device);
    if constexpr (kCountCalls) counts_[device].count_destroyed(1);
  }

  /// Fills the depot with up to `count` new events, in magazines filled to `fill` (not to their
  /// capacity, which one thread's first Get would take whole). Each magazine's places under the
  /// idle limit are reserved before its events are created, so Reserve stops where the depot is
  /// full rather than create events only to destroy them. Throws std::invalid_argument, creating
  /// nothing, if `count` exceeds the limit itself; otherwise what create and the arena throw, and
  /// the events created until then stay.
  void reserve(int device, std::size_t count, std::uint32_t fill) {
    if (max_idle_ != kUnlimitedIdle && count > max_idle_)
      throw std::invalid_argument("evpool: Reserve of " + std::to_string(count) + " events on device " +
                                  std::to_string(device) + ", over the pool's idle limit of " +
                                  std::to_string(max_idle_) + " per device; nothing was created");
    Depot &depot = depots_[device];
    while (count > 0) {
      const auto places =
          static_cast<std::uint32_t>(depot.reserve_up_to(std::min<std::size_t>(count, fill), max_idle_));
      if (places == 0) return;  // the depot is full: what is left would be retired at once
      std::uint32_t index;
      try {
        index = depot.take_empty(arena_);
      } catch (...) {
        depot.release_places(places, max_idle_);
        throw;
      }
      Magazine &magazine = arena_[index];
      // Stopped short (a failed create, or the cap, where Reserve stops as Get does): the places not
      // filled are released, and what was created stays.
      const auto hand_over_what_was_created = [&] {
        depot.release_places(places - magazine.count, max_idle_);
        if (magazine.empty())
          depot.give_empty(index, arena_);
        else
          depot.give_reserved(index, arena_);
      };
      bool at_cap = false;
      try {
        while (magazine.count < places &&
               !(at_cap = !create_within_cap(device, magazine.handles[magazine.count]))) {
          if (checker_) checker_->on_created_idle(device, magazine.handles[magazine.count]);
          ++magazine.count;
        }
      } catch (...) {
        hand_over_what_was_created();
        throw;
      }
      hand_over_what_was_created();  // all of them, but at the cap
      if (at_cap) return;
      count -= places;
    }
  }

  /// One event of the device's depot into `out`; false if it has none.
  bool take_one(int device, handle_type &out) noexcept {
    return depots_[device].take_one(out, arena_, max_idle_);
  }

  // ---- Retired events (retired_handles.h) ---------------------------------------------------------

  /// Retires the last `count` events of `magazine` (which keeps the others), moved into a spare
  /// magazine. Only if none can be had (the process is out of memory) are they destroyed here.
  void retire(int device, Magazine &magazine, std::uint32_t count) noexcept {
    if (count == 0) return;
    const std::uint32_t index = spare_magazine(device);
    if (index == kNilIndex) {
      while (count-- > 0) destroy(device, magazine.handles[--magazine.count]);
      return;
    }
    Magazine &retired = arena_[index];
    while (count-- > 0) retired.handles[retired.count++] = magazine.handles[--magazine.count];
    retired_[device].give(index, arena_);
  }

  /// Retires one event, as retire() does.
  void retire_one(int device, handle_type handle) noexcept {
    const std::uint32_t index = spare_magazine(device);
    if (index == kNilIndex) return destroy(device, handle);
    Magazine &retired = arena_[index];
    retired.handles[retired.count++] = handle;
    retired_[device].give(index, arena_);
  }

  /// One retired event of the device into `out`, to be handed out again; false if it has none.
  bool take_retired_one(int device, handle_type &out) noexcept {
    const std::uint32_t index = retired_[device].take(arena_);
    if (index == kNilIndex) return false;
    Magazine &magazine = arena_[index];
    out = magazine.handles[--magazine.count];
    put_back_retired(device, index);
    return true;
  }

  /// A Get off its fast path, after it took its event, standing for `gets` Gets (a thread cache's
  /// look reports its batch): destroys the device's retired events that demand has shown surplus
  /// (retired_handles.h), at most kRetiredDestroyedPerGet.
  void destroy_surplus_retired(int device, std::uint32_t gets = 1) noexcept {
    const std::uint64_t idle_bound = max_idle_ == kUnlimitedIdle ? 0 : max_idle_;
    for (std::uint32_t most = retired_[device].surplus_after_gets(idle_bound, kRetiredDestroyedPerGet, gets);
         most > 0;) {
      const std::uint32_t index = retired_[device].take(arena_);
      if (index == kNilIndex) return;
      Magazine &magazine = arena_[index];
      for (; most > 0 && !magazine.empty(); --most) destroy(device, magazine.handles[--magazine.count]);
      put_back_retired(device, index);
    }
  }

  /// Destroys the device's retired events as they are now: one snapshot, so that threads retiring
  /// meanwhile cannot keep a Trim going.
  void destroy_all_retired(int device) noexcept { destroy_all_of(retired_[device], device); }
  /// The same for the handles set aside busy.
  void destroy_all_set_aside(int device) noexcept { destroy_all_of(set_aside_[device], device); }

 private:
  void destroy_all_of(Retired &stack, int device) noexcept {
    for (std::uint32_t index = stack.take_all(arena_); index != kNilIndex;) {
      Magazine &magazine = arena_[index];
      const std::uint32_t next = magazine.next.load(std::memory_order_relaxed);  // ours since take_all
      while (!magazine.empty()) destroy(device, magazine.handles[--magazine.count]);
      depots_[device].give_empty(index, arena_);
      index = next;
    }
  }

 public:
  /// The device's retired events (for stats(); exact once no call is in progress).
  std::uint64_t retired(int device) const noexcept { return retired_[device].count(); }

  // ---- Busy handles (BusyHandleBackend; see the rationale) ----------------------------------------

  /// An idle handle of the device into `out`: from the depot, where every busy handle met on the
  /// way is set aside, else from those set aside, asked from the longest set aside (the likeliest
  /// to be done) until one is idle, else from the retired ones. False if every one asked was busy
  /// (or there is none): the caller may create. A retired handle found busy is set aside too.
  /// Each magazine is asked from its bottom, where the handles put into it first lie. `ticket`:
  /// for a caller that looks again and again (a Get waiting at the cap), what it saw of the
  /// sweeps at its last look (sweep_set_aside); nullptr for one look.
  template <class Busy>
  bool take_idle(int device, handle_type &out, Busy &&busy, SweepTicket *ticket = nullptr) noexcept {
    if (take_idle_in_depot(device, out, busy)) return true;
    if (sweep_set_aside(device, out, busy, ticket)) return true;
    // A tidy that ended before the sweep's look at the word (one this Get waited for, or one that
    // ran between its two looks) filed the idle handles it found in the depot, after the first
    // look (a tidy files every idle handle of the magazine it asks): one more look there, or the
    // Get would create beside them (one did, beside 15 that a tidy had filed). The sweep's acquire
    // of the word orders the tidy's filing before this look. On an empty depot it costs a load.
    if (take_idle_in_depot(device, out, busy)) return true;
    while (take_retired_one(device, out)) {
      if (!busy(out)) return true;
      set_aside_one(device, out);
    }
    return false;
  }

  /// Asks the magazine of handles set aside longest ago, unless a sweep runs: its idle ones go to
  /// the depot (under the idle limit; the rest are retired), its busy ones back set aside, on top,
  /// so that the next call asks the next oldest. A Get off its fast path calls it, so that handles
  /// set aside in a burst do not stay set aside, out of the idle limit, once their work is done,
  /// when no Get misses the depot to sweep them.
  template <class Busy>
  void tidy_set_aside(int device, Busy &&busy) noexcept {
    if (set_aside_[device].empty()) return;
    std::atomic<std::uint64_t> &word = sweeps_[device].value;
    // Acquire/release as in sweep_set_aside; a sweep in progress does the tidying. The tidy asks
    // one magazine, not all: it is no sweep, and leaves the count of sweeps as it was, and their
    // verdict too unless it found an idle handle (a Get that waited for it then sweeps itself, or
    // finds none set aside and looks at the depot again, where the tidy filed them).
    std::uint64_t now = word.load(std::memory_order_acquire);
    if (SweepWord::running(now) ||
        !word.compare_exchange_strong(now, now | SweepWord::kRunning, std::memory_order_acquire,
                                      std::memory_order_relaxed))
      return;
    const std::uint32_t oldest = reversed(set_aside_[device].take_all(arena_));
    Batch now_idle(*this, device, &DeviceDepots::return_filled);
    bool found_idle = false;
    if (oldest != kNilIndex) {
      Magazine &magazine = arena_[oldest];
      std::uint32_t still_busy = 0;
      for (std::uint32_t i = 0; i < magazine.count; ++i) {
        if (busy(magazine.handles[i])) {
          magazine.handles[still_busy++] = magazine.handles[i];
        } else {
          now_idle.add(magazine.handles[i]);
          found_idle = true;
        }
      }
      magazine.count = still_busy;
      give_back_set_aside(device, magazine.next.load(std::memory_order_relaxed));
      if (magazine.empty())
        depots_[device].give_empty(oldest, arena_);
      else
        set_aside_magazine(device, oldest);
    }
    now_idle.flush();  // before the release: a waiter that sweeps next finds them in the depot
    word.store(found_idle ? now & ~SweepWord::kAllBusy : now, std::memory_order_release);
  }

  /// Handles set aside busy (for stats(); exact once no call is in progress).
  std::uint64_t set_aside(int device) const noexcept { return set_aside_[device].count(); }
  /// Whether a Get sweeps the device's set-aside handles now (it holds them out of the count).
  bool sweeping(int device) const noexcept {
    return SweepWord::running(sweeps_[device].value.load(std::memory_order_relaxed));
  }

  /// One event into the device's depot; false if it is over the idle limit (the caller still
  /// owns it). Throws std::bad_alloc or std::length_error when no magazine can be had; then
  /// nothing changed.
  bool give_one(int device, handle_type handle) {
    return depots_[device].give_one(handle, arena_, max_idle_);
  }

  // ---- Magazines in and out (the verbs of the rationale) ---------------------------------------

  /// The magazine at `index` as a slot holds it.
  Slot slot_of(std::uint32_t index) noexcept { return Slot::load(arena_[index], index); }

  /// A filled magazine of the device, or kNilIndex if its depot has none.
  std::uint32_t take_filled(int device) noexcept { return depots_[device].take_filled(arena_, max_idle_); }

  /// An empty magazine, reused or new. Throws std::bad_alloc or std::length_error; then nothing
  /// changed.
  std::uint32_t take_empty(int device) { return depots_[device].take_empty(arena_); }

  /// Gives back an empty magazine got from take_empty or take_filled, never filled.
  void give_back_empty(int device, std::uint32_t index) noexcept {
    depots_[device].give_empty(index, arena_);
  }

  /// The slot's events join the depot, as many as fit under the idle limit; the others are
  /// retired. False if none fit (or it held none): the caller keeps the magazine, and the slot
  /// now counts 0.
  bool deposit(Slot &slot, int device) noexcept {
    Depot &depot = depots_[device];
    Magazine &magazine = slot.write_back_count();
    const std::uint64_t fit = depot.reserve_up_to(magazine.count, max_idle_);
    retire(device, magazine, magazine.count - static_cast<std::uint32_t>(fit));
    slot.set_count(magazine.count);
    if (magazine.empty()) return false;
    depot.give_reserved(slot.index, arena_);
    return true;
  }

  /// The slot's magazine goes back, filled or (if none of its events fit) empty.
  void return_magazine(Slot slot, int device) noexcept {
    if (!deposit(slot, device)) return_empty(slot, device);
  }

  /// The slot's magazine, which holds no event, goes back to the empty stack.
  void return_empty(const Slot &slot, int device) noexcept {
    (void)slot.write_back_count();  // the empty stack holds magazines whose count is 0
    depots_[device].give_empty(slot.index, arena_);
  }

  /// deposit(), with an empty magazine put in the slot's place. False (nothing changed) if no
  /// empty magazine can be had.
  bool exchange_for_empty(Slot &slot, int device) noexcept {
    if (slot.empty()) return true;
    const std::uint32_t spare = spare_magazine(device);
    if (spare == kNilIndex) return false;
    if (!deposit(slot, device)) {
      depots_[device].give_empty(spare, arena_);
      return true;  // its events were retired: none fit
    }
    slot = slot.handing_gets_to(slot_of(spare));
    return true;
  }

  /// Destroys the events of a magazine held in a slot; the slot stays, empty.
  void destroy_handles(Slot &slot, int device) noexcept {
    Magazine &magazine = slot.write_back_count();
    while (magazine.count > 0) destroy(device, magazine.handles[--magazine.count]);
    slot.set_count(0);
  }

  // ---- Trimming and forgetting -------------------------------------------------------------------

  /// Keeps `keep` of each device's depot events and destroys the others, and every retired or
  /// set-aside one (a busy stream's work completes after its destruction, as CUDA promises).
  /// Events given to a depot, retired or set aside meanwhile may stay.
  void trim(std::size_t keep) noexcept {
    for (int device = 0; device < device_count_; ++device) {
      trim_device(device, keep);
      destroy_all_retired(device);
      destroy_all_set_aside(device);
    }
  }

  /// The events each depot holds (for stats(); exact once no call is in progress).
  std::uint64_t idle(int device) const noexcept { return depots_[device].idle(max_idle_); }

  /// A fork() child forgets its parent's events, without destroying them: the depots, the counts
  /// and checked mode's records start empty. By the child's one forgetting thread.
  void forget_all_in_child() noexcept {
    for (int device = 0; device < device_count_; ++device) {
      depots_[device].forget_all(arena_);
      for (Retired *kept : {&retired_[device], &set_aside_[device]})
        kept->forget_all(arena_, [&](std::uint32_t index) { depots_[device].give_empty(index, arena_); });
      kept_[device].value.store(0, std::memory_order_relaxed);
      sweeps_[device].value.store(0, std::memory_order_relaxed);  // a sweep the fork cut off
    }
    if constexpr (kCountCalls)  // the child starts empty, and so do its figures
      for (int device = 0; device < device_count_; ++device) counts_[device].reset();
    if (checker_) checker_->forget_all_in_child();
  }

 private:
  // Handles collected one by one into spare magazines, each handed to `give(device, index)` when
  // full and at flush(). Where no magazine can be had (the process is out of memory) a handle is
  // retired instead, and asked again before it is handed out; where not even a retired one can
  // have a magazine, retire_one destroys it (a busy stream's work completes first, in CUDA).
  class Batch {
   public:
    using Give = void (DeviceDepots::*)(int, std::uint32_t) noexcept;
    Batch(DeviceDepots &depots, int device, Give give) noexcept
        : depots_(depots), device_(device), give_(give) {}
    Batch(const Batch &) = delete;
    Batch &operator=(const Batch &) = delete;
    ~Batch() { flush(); }
    void add(handle_type handle) noexcept {
      if (index_ == kNilIndex && (index_ = depots_.spare_magazine(device_)) == kNilIndex)
        return depots_.retire_one(device_, handle);
      Magazine &magazine = depots_.arena_[index_];
      magazine.handles[magazine.count++] = handle;
      if (magazine.count == Magazine::kCapacity) flush();
    }
    void flush() noexcept {
      if (index_ != kNilIndex) (depots_.*give_)(device_, std::exchange(index_, kNilIndex));
    }

   private:
    DeviceDepots &depots_;
    const int device_;
    const Give give_;
    std::uint32_t index_ = kNilIndex;
  };

  // A place under the cap, taken if one is free.
  bool take_place(int device) noexcept {
    std::atomic<std::uint64_t> &kept = kept_[device].value;
    std::uint64_t now = kept.load(std::memory_order_relaxed);
    do {
      if (now >= max_kept_) return false;
    } while (!kept.compare_exchange_weak(now, now + 1, std::memory_order_relaxed, std::memory_order_relaxed));
    return true;
  }
  // Stops at 0: a handle given to Put that the pool never counted (an outside handle that records
  // its device, which Put cannot tell from its own: pool_cap.h) is still destroyed through here,
  // and a count that wrapped below 0 would refuse every create for ever. Such handles pass the cap
  // by as many, as pool_cap.h says; they never take it away. Relaxed, as take_place.
  void release_place(int device) noexcept {
    std::atomic<std::uint64_t> &kept = kept_[device].value;
    std::uint64_t now = kept.load(std::memory_order_relaxed);
    while (now != 0 &&
           !kept.compare_exchange_weak(now, now - 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
    }
  }

  // A magazine of busy handles (count >= 1) joins those set aside.
  void set_aside_magazine(int device, std::uint32_t index) noexcept {
    set_aside_[device].give(index, arena_);
  }

  void set_aside_one(int device, handle_type handle) noexcept {
    Batch batch(*this, device, &DeviceDepots::set_aside_magazine);
    batch.add(handle);
  }

  // A magazine taken with take_filled goes back to the depot with what it still holds, as many as
  // fit under the idle limit (the rest retired), or to the spares if it holds nothing.
  void return_filled(int device, std::uint32_t index) noexcept {
    Depot &depot = depots_[device];
    Magazine &magazine = arena_[index];
    const std::uint64_t fit = depot.reserve_up_to(magazine.count, max_idle_);
    retire(device, magazine, magazine.count - static_cast<std::uint32_t>(fit));
    if (magazine.empty())
      depot.give_empty(index, arena_);
    else
      depot.give_reserved(index, arena_);
  }

  // The depot's handles, each magazine asked from its bottom, until one is idle (into `out`); the
  // busy ones met on the way are set aside.
  template <class Busy>
  bool take_idle_in_depot(int device, handle_type &out, Busy &busy) noexcept {
    Batch set_aside(*this, device, &DeviceDepots::set_aside_magazine);
    bool found = false;
    for (std::uint32_t index = take_filled(device); !found && index != kNilIndex;) {
      Magazine &magazine = arena_[index];
      std::uint32_t asked = 0;
      while (!found && asked < magazine.count) {
        const handle_type handle = magazine.handles[asked++];
        if (busy(handle))
          set_aside.add(handle);
        else
          out = handle, found = true;
      }
      // What was not asked goes back as it was, moved down over what was.
      std::copy(magazine.handles + asked, magazine.handles + magazine.count, magazine.handles);
      magazine.count -= asked;
      return_filled(device, index);
      if (!found) index = take_filled(device);
    }
    set_aside.flush();
    return found;
  }

  // Asks the handles set aside on the device, as they are now (one snapshot: handles set aside
  // meanwhile wait for the next sweep), until one is idle: it goes to `out`. False if every one
  // asked was busy. One Get sweeps at a time, and a sweep serves every Get that waits for it:
  //
  // - A Get that finds a sweep running waits for it to end (reading the word, never writing it),
  //   and takes its verdict: if it found every handle busy, the Get asks none of them again. Only
  //   if it found an idle one (and stopped there) does the waiter sweep in turn, for another.
  // - A Get that passes a ticket (one waiting at the cap, looking again round after round) asks
  //   none either if a sweep that began after its previous look found every handle busy.
  // - A sweep asks first the handles no sweep asked since they were set aside: those it asks and
  //   finds busy go back on top, to be asked last by the next sweep (busy ones are asked from the
  //   oldest, the likeliest to be done; most sweeps stop at the first or second).
  //
  // So a sweep asks each handle set aside at most once, and W Gets that meet sweeps ask together
  // at most the handles set aside plus one idle one each, not W times the handles set aside. A
  // waiter never creates while a sweep holds handles out: a Get creates only once every handle
  // set aside was found busy by a sweep that held them all, or none was set aside while it held
  // the word, and take_idle then looks at the depot again.
  template <class Busy>
  bool sweep_set_aside(int device, handle_type &out, Busy &busy, SweepTicket *ticket) noexcept {
    std::atomic<std::uint64_t> &word = sweeps_[device].value;
    // Acquire, on every read of the word: pairs with the release of the sweep that ended, so that
    // this Get sees the magazines it gave back (the stack's own orders publish them too) and its
    // verdict is about handles this Get could have asked.
    std::uint64_t now = word.load(std::memory_order_acquire);
    const std::uint64_t begun_after_last_look = ticket != nullptr ? ticket->begun_after : ~std::uint64_t{0};
    for (;;) {
      if (ticket != nullptr) ticket->begun_after = SweepWord::next_to_begin(now);
      if (!SweepWord::running(now)) {
        if (SweepWord::finished(now) >= begun_after_last_look && SweepWord::all_busy(now)) return false;
        // Taken even when none seem set aside: a tidy that took them all may be asking them (their
        // count reads 0 then), and a Get that passed it by would create beside the idle ones it
        // files. Held, the word says that no tidy runs, and that every tidy before filed its idle
        // handles (its release, this acquire).
        if (word.compare_exchange_weak(now, now | SweepWord::kRunning, std::memory_order_acquire,
                                       std::memory_order_acquire))
          break;
        continue;
      }
      // A sweep or a tidy runs: wait for the word to change. A sweep that ended counts one more
      // (its verdict stays while tidies run); a tidy leaves the count as it was, and the Get then
      // sweeps itself.
      const std::uint64_t awaited = SweepWord::finished(now) + 1, seen = now;
      while ((now = word.load(std::memory_order_acquire)) == seen) Policy::spin_wait();
      if (SweepWord::finished(now) >= awaited && SweepWord::all_busy(now)) return false;
    }
    if (set_aside_[device].empty()) {              // none, and no tidy holds any: no sweep
      word.store(now, std::memory_order_release);  // as it was
      return false;
    }
    const bool found = sweep_oldest_first(device, out, busy);
    // Release: publishes the magazines given back, with the verdict, to the next reader.
    word.store(SweepWord::ended(now, /*all_busy=*/!found), std::memory_order_release);
    return found;
  }

  template <class Busy>
  bool sweep_oldest_first(int device, handle_type &out, Busy &busy) noexcept {
    const std::uint32_t oldest = reversed(set_aside_[device].take_all(arena_));
    bool found = false;
    Chain asked;  // the magazines asked, up to the one that held the idle handle
    for (std::uint32_t index = oldest; index != kNilIndex;) {
      Magazine &magazine = arena_[index];
      const std::uint32_t next = magazine.next.load(std::memory_order_relaxed);
      if (found) {  // not asked: back first, oldest first, under the asked ones
        set_aside_magazine(device, index);
        index = next;
        continue;
      }
      for (std::uint32_t i = 0; !found && i < magazine.count; ++i) {
        if (busy(magazine.handles[i])) continue;
        out = magazine.handles[i];
        found = true;
        std::copy(magazine.handles + i + 1, magazine.handles + magazine.count, magazine.handles + i);
        --magazine.count;
      }
      if (magazine.empty())
        depots_[device].give_empty(index, arena_);
      else
        asked.append(index, arena_);
      index = next;
    }
    if (asked.last != kNilIndex) arena_[asked.last].next.store(kNilIndex, std::memory_order_relaxed);
    give_back_set_aside(device, asked.first);  // oldest first: the last asked ends on top
    return found;
  }

  // A chain of magazines taken with take_all (ours since its acquire: relaxed reads and writes of
  // the links), linked from the last given, relinked from the first given; returns its head.
  std::uint32_t reversed(std::uint32_t index) noexcept {
    std::uint32_t first = kNilIndex;
    while (index != kNilIndex) {
      const std::uint32_t next = arena_[index].next.load(std::memory_order_relaxed);
      arena_[index].next.store(first, std::memory_order_relaxed);
      first = index;
      index = next;
    }
    return first;
  }

  // Gives back a chain of set-aside magazines from `index` on, oldest first, so that the newest
  // ends on top as it was.
  void give_back_set_aside(int device, std::uint32_t index) noexcept {
    while (index != kNilIndex) {
      const std::uint32_t next = arena_[index].next.load(std::memory_order_relaxed);
      set_aside_magazine(device, index);
      index = next;
    }
  }

  // Keeps `keep` of the device's depot events (the magazines stay as they were, the last one cut
  // down) and destroys the others.
  void trim_device(int device, std::size_t keep) noexcept {
    Depot &depot = depots_[device];
    // Kept magazines go back as one chain, emptied ones to the empty stack as another: two writes
    // of the heads, whatever the number of magazines.
    Chain kept_chain, emptied_chain;
    std::size_t kept = 0;
    // The chain is ours alone since take_all_filled; relaxed reads of `next` are ordered by it.
    for (std::uint32_t index = depot.take_all_filled(arena_); index != kNilIndex;) {
      Magazine &magazine = arena_[index];
      const std::uint32_t next = magazine.next.load(std::memory_order_relaxed);
      const std::size_t room = keep - kept;
      if (magazine.count > room) {
        const auto excess = static_cast<std::uint32_t>(magazine.count - room);
        for (std::uint32_t i = 0; i < excess; ++i) destroy(device, magazine.handles[--magazine.count]);
        depot.release_places(excess, max_idle_);
      }
      kept += magazine.count;
      (magazine.empty() ? emptied_chain : kept_chain).append(index, arena_);
      index = next;
    }
    if (kept_chain.first != kNilIndex) depot.restore_filled(kept_chain.first, kept_chain.last, arena_);
    if (emptied_chain.first != kNilIndex)
      depot.give_empty_chain(emptied_chain.first, emptied_chain.last, arena_);
  }

  // An empty magazine, reused or new; kNilIndex if the arena cannot grow.
  std::uint32_t spare_magazine(int device) noexcept {
    try {
      return depots_[device].take_empty(arena_);
    } catch (...) {
      return kNilIndex;
    }
  }

  // A magazine taken from the retired events goes back to them, or, emptied, to the depot's spares.
  void put_back_retired(int device, std::uint32_t index) noexcept {
    if (arena_[index].empty())
      depots_[device].give_empty(index, arena_);
    else
      retired_[device].give(index, arena_);
  }

  // A chain of magazines being built, linked through `next`, in the order appended.
  struct Chain {
    std::uint32_t first = kNilIndex, last = kNilIndex;
    void append(std::uint32_t index, Arena &arena) noexcept {
      if (last == kNilIndex)
        first = index;
      else
        arena[last].next.store(index, std::memory_order_relaxed);
      last = index;
    }
  };

  Backend backend_;
  options_type options_;
  std::size_t max_idle_;
  int device_count_ = 0;
  Arena arena_;
  std::unique_ptr<Depot[]> depots_;
  std::unique_ptr<Retired[]> retired_;
  // Busy handles set aside (see the rationale): the same counted stack of magazines as the retired.
  std::unique_ptr<Retired[]> set_aside_;
  // Per device, the sweeps of the set-aside handles: whether one runs, and what the last one
  // found (SweepWord; sweep_set_aside).
  std::unique_ptr<CacheLinePadded<std::atomic<std::uint64_t>>[]> sweeps_;
  // Per device, the handles that exist through the pool (created or taken in, and neither destroyed
  // nor let go: handed out ones included): what max_kept bounds (see "The cap" above).
  std::unique_ptr<CacheLinePadded<std::atomic<std::uint64_t>>[]> kept_;
  std::size_t max_kept_ = kUnlimitedKept;
  std::unique_ptr<SharedCallCounts[]> counts_;           // per device; only with Policy::count_calls
  std::unique_ptr<HandleChecker<handle_type>> checker_;  // only in checked mode
};

}  // namespace evpool::detail
