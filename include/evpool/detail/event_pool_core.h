// evpool: the lock-free core of BasicEventPool. Private to the library.
//
// Design rationale
// ----------------
// The design replaced (DALI's CUDAEventPool) keeps per-device intrusive lists of EventEntry nodes
// and a list of spare nodes, all behind one yielding spinlock; under contention it serialises every
// Get and Put of every device on that lock. Here the same structure is lock-free:
//
//   devices_[d].events: TaggedIndexStack of EventEntry nodes, each holding an idle event of d
//   devices_[d].spare:  TaggedIndexStack of EventEntry nodes holding nothing, for Puts to d
//   arena_:             the NodeArena that owns every node, and frees none before the core dies
//
// Get(d) pops a node from devices_[d].events, takes its event and pushes the node onto
// devices_[d].spare; on a miss it creates an event, holding nothing while it does. Put(e, d) pops
// a spare node of d (allocating one only if none is spare), stores e in it and pushes it onto
// devices_[d].events. A hit therefore costs two compare-exchanges and no call into the backend,
// except the current-device query when the caller passes device -1.
//
// The spare list is per device, not global as in DALI: a node popped by Get(d) is only ever
// needed again by a Put(d), and a global list would make threads working on different devices
// contend on one word. Each list head sits alone on its own 128 bytes.
//
// The bit layout of the heads, why ABA cannot strike and why no node is freed early are explained
// in tagged_index_stack.h and node_arena.h. Of note for this pool: Get and Put move nodes between
// two LIFO stacks, which preserves the nodes' relative order, so an ABA on a head would be
// harmless were it not for Trim and Purge, which reverse a device's chain onto its spare stack.
// The 32-bit tag is what keeps that case safe (test/interleaving_test.cc finds the corruption with
// a 1-bit tag).
//
// A shared lease keeps its event in its node: the node leaves the event stack without visiting
// the spare stack, carries the lease's reference count, and goes straight back when the last
// reference drops. No control block is allocated.
//
// Idle limit: with a finite limit, each device counts its idle events beside its event stack's
// head (same 128 bytes, so the count costs no extra cache line). Put reserves a place in the
// count before pushing and destroys the event when none is free; Get releases the place after
// popping. So the count is never below the true number of idle events and never above the limit.
// Without a limit the count is not kept at all.
//
// Lifetime: the core counts references, one for the BasicEventPool that owns it and one for each
// lease; whoever drops the last one deletes the core, destroying its idle events. A lease that
// outlives its pool therefore returns its event to a core that still exists.
//
// After fork() the child must not hand out or destroy its parent's events: the first operation in
// a child forgets every idle event (fork_guard.h), and the child starts with an empty pool.
//
// Errors leave everything as it was: every argument is checked before anything changes, Put takes
// ownership of the event only after the last step that can throw (a node allocation), and a
// failed create in Get holds nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/tagged_index_stack.h"
#include "evpool/event_backend.h"

namespace evpool::detail {

inline constexpr std::size_t kUnlimitedIdle = std::numeric_limits<std::size_t>::max();

template <EventBackend Backend, class Policy>
class EventPoolCore {
 public:
  using event_type = typename Backend::event_type;
  using handle_type = typename Backend::handle_type;

  // Owned through references: create with `new`, end with release_reference().
  EventPoolCore(Backend backend, unsigned event_flags, std::size_t max_idle_per_device)
      : backend_(std::move(backend)), event_flags_(event_flags), max_idle_(max_idle_per_device) {
    backend_.validate_flags(event_flags_);
    device_count_ = backend_.device_count();
    if (device_count_ <= 0)
      throw std::invalid_argument("evpool: the backend reports " + std::to_string(device_count_) +
                                  " devices; a pool needs at least one");
    if (max_idle_ == 0)
      throw std::invalid_argument("evpool: an idle limit of 0 would destroy every event put back; "
                                  "use kUnlimitedIdle for no limit");
    devices_ = std::make_unique<DeviceLists[]>(static_cast<std::size_t>(device_count_));
  }
  EventPoolCore(const EventPoolCore &) = delete;
  EventPoolCore &operator=(const EventPoolCore &) = delete;

  void acquire_reference() noexcept {
    // Relaxed: a new reference is made from an existing one, which keeps the core alive meanwhile.
    references_.fetch_add(1, std::memory_order_relaxed);
  }
  void release_reference() noexcept {
    // Acq_rel: the last owner must see every other owner's use of the core before deleting it.
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  event_type Get(int device_id) {
    forget_events_of_parent_process();
    const int device = resolve_device(device_id, "Get");
    DeviceLists &lists = devices_[device];
    const std::uint32_t index = pop_idle(lists);
    if (index == kNilIndex) return backend_.adopt(backend_.create(event_flags_, device), device);
    const handle_type handle = arena_[index].handle;
    lists.spare.value.push(index, arena_);
    return backend_.adopt(handle, device);
  }

  void Put(event_type &&event, int device_id) {
    if (!event) throw std::invalid_argument("evpool: Put of an empty event");
    forget_events_of_parent_process();
    DeviceLists &lists = devices_[device_for_put(event, device_id)];
    if (!reserve_idle_place(lists)) {
      event = event_type();  // over the idle limit: destroy instead of keeping
      return;
    }
    std::uint32_t index;
    try {
      index = spare_or_new_node(lists);
    } catch (...) {
      release_idle_places(lists, 1);
      throw;
    }
    arena_[index].handle = event.release();
    lists.events.value.stack.push(index, arena_);
  }

  void Reserve(int device_id, std::size_t count) {
    const int device = resolve_device(device_id, "Reserve");
    for (std::size_t i = 0; i < count; ++i)
      Put(backend_.adopt(backend_.create(event_flags_, device), device), device);
  }

  void Trim(std::size_t keep_per_device) noexcept {
    forget_events_of_parent_process();
    for (int device = 0; device < device_count_; ++device)
      drain_idle_events(devices_[device], keep_per_device, /*destroy=*/true);
  }

  // Shared leases. A leased node is on no stack; its `lease_references` counts the leases.
  std::uint32_t lease_node(int device_id) {
    forget_events_of_parent_process();
    const int device = resolve_device(device_id, "LeaseShared");
    DeviceLists &lists = devices_[device];
    std::uint32_t index = pop_idle(lists);
    if (index == kNilIndex) {
      const handle_type handle = backend_.create(event_flags_, device);
      try {
        index = spare_or_new_node(lists);
      } catch (...) {
        backend_.destroy(handle);
        throw;
      }
      arena_[index].handle = handle;
    }
    EventEntry &entry = arena_[index];
    entry.device = device;
    entry.fork_generation = fork_generation();
    // Relaxed: the node is ours alone until the lease that carries it is shared.
    entry.lease_references.store(1, std::memory_order_relaxed);
    acquire_reference();
    return index;
  }
  void retain_node(std::uint32_t index) noexcept {
    // Relaxed: a new reference is made from an existing one (as in std::shared_ptr).
    arena_[index].lease_references.fetch_add(1, std::memory_order_relaxed);
  }
  void release_node(std::uint32_t index) noexcept {
    EventEntry &entry = arena_[index];
    // Acq_rel: the last holder returns the node, after every other holder's last use of it.
    if (entry.lease_references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    DeviceLists &lists = devices_[entry.device];
    forget_events_of_parent_process();
    if (entry.fork_generation != fork_generation()) {
      lists.spare.value.push(index, arena_);  // a parent's event, leased before fork(): forget it
    } else if (reserve_idle_place(lists)) {
      lists.events.value.stack.push(index, arena_);
    } else {
      backend_.destroy(entry.handle);
      lists.spare.value.push(index, arena_);
    }
    release_reference();
  }
  handle_type node_handle(std::uint32_t index) noexcept { return arena_[index].handle; }
  int node_device(std::uint32_t index) noexcept { return arena_[index].device; }

  int device_count() const noexcept { return device_count_; }
  unsigned event_flags() const noexcept { return event_flags_; }
  std::size_t max_idle_per_device() const noexcept { return max_idle_; }
  std::size_t node_count() const noexcept { return arena_.allocated(); }

 private:
  template <class T>
  using Atomic = typename Policy::template atomic<T>;

  // One pooled event, a leased event (shared lease), or a spare node (then `handle` is stale and
  // meaningless). Each node has its 128 bytes to itself: nodes of different devices (and of
  // different threads' events) lie side by side in the arena, and Get and Put write them, so
  // sharing a line would make threads that share nothing else contend. The cost is 128 bytes per
  // event the pool ever held idle or leased at once.
  struct alignas(kFalseSharingRange) EventEntry {
    handle_type handle{};
    Atomic<std::uint32_t> next{kNilIndex};
    Atomic<std::uint32_t> lease_references{0};
    int device = -1;                      // of a leased node
    std::uint32_t fork_generation = 0;    // of the process that leased the node
  };
  static_assert(sizeof(EventEntry) == kFalseSharingRange);

  using Arena = NodeArena<EventEntry, Policy::template atomic>;
  using Stack = TaggedIndexStack<Policy::template atomic, Policy::tag_bits, typename Policy::backoff>;

  struct EventStack {
    Stack stack;
    Atomic<std::uint64_t> idle{0};  // kept only with a finite idle limit
  };
  struct DeviceLists {
    CacheLinePadded<EventStack> events;
    CacheLinePadded<Stack> spare;
  };
  static_assert(sizeof(DeviceLists) == 2 * kFalseSharingRange, "each head alone on its own 128 bytes");

  ~EventPoolCore() { Trim(0); }

  bool limited() const noexcept { return max_idle_ != kUnlimitedIdle; }

  // A spare node of the device, or a new one from the arena (which may throw std::bad_alloc).
  std::uint32_t spare_or_new_node(DeviceLists &lists) {
    const std::uint32_t index = lists.spare.value.pop(arena_);
    return index != kNilIndex ? index : arena_.allocate();
  }

  std::uint32_t pop_idle(DeviceLists &lists) noexcept {
    const std::uint32_t index = lists.events.value.stack.pop(arena_);
    if (index != kNilIndex) release_idle_places(lists, 1);
    return index;
  }

  bool reserve_idle_place(DeviceLists &lists) noexcept {
    if (!limited()) return true;
    // Relaxed: the count orders nothing; it only bounds how many events are kept.
    if (lists.events.value.idle.fetch_add(1, std::memory_order_relaxed) < max_idle_) return true;
    lists.events.value.idle.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }

  void release_idle_places(DeviceLists &lists, std::uint64_t count) noexcept {
    if (limited()) lists.events.value.idle.fetch_sub(count, std::memory_order_relaxed);
  }

  // Detaches a device's idle events, keeps the first `keep` of them (putting them back as one
  // chain) and moves the others' nodes to the spare list, destroying their events or, in a forked
  // child whose events belong to the parent, only forgetting them.
  void drain_idle_events(DeviceLists &lists, std::size_t keep, bool destroy) noexcept {
    const std::uint32_t first = lists.events.value.stack.pop_all();
    if (first == kNilIndex) return;
    // The chain is ours alone since pop_all; relaxed reads of `next` are ordered by it.
    std::uint32_t kept_last = kNilIndex, index = first;
    for (std::size_t kept = 0; kept < keep && index != kNilIndex; ++kept) {
      kept_last = index;
      index = arena_[index].next.load(std::memory_order_relaxed);
    }
    if (kept_last != kNilIndex) lists.events.value.stack.push_chain(first, kept_last, arena_);
    if (index == kNilIndex) return;
    const std::uint32_t dropped_first = index;
    std::uint32_t dropped_last = index;
    std::uint64_t dropped = 0;
    for (; index != kNilIndex; index = arena_[index].next.load(std::memory_order_relaxed)) {
      if (destroy) backend_.destroy(arena_[index].handle);
      dropped_last = index;
      ++dropped;
    }
    release_idle_places(lists, dropped);
    lists.spare.value.push_chain(dropped_first, dropped_last, arena_);
  }

  void forget_events_of_parent_process() noexcept {
    fork_guard_.check([this] {
      for (int device = 0; device < device_count_; ++device) {
        drain_idle_events(devices_[device], 0, /*destroy=*/false);
        // Places held by leases of the parent's events are never given back: start from zero.
        devices_[device].events.value.idle.store(0, std::memory_order_relaxed);
      }
    });
  }

  int resolve_device(int device_id, const char *operation) const {
    const int device = device_id == -1 ? backend_.current_device() : device_id;
    check_device(device, operation);
    return device;
  }

  int device_for_put(const event_type &event, int device_id) const {
    const int recorded = event.device_id();
    if (device_id == -1) return resolve_device(recorded, "Put");
    check_device(device_id, "Put");
    if (recorded != -1 && recorded != device_id)
      throw std::invalid_argument("evpool: Put of an event of device " + std::to_string(recorded) +
                                  " under device " + std::to_string(device_id) +
                                  "; the caller still owns the event");
    return device_id;
  }

  void check_device(int device, const char *operation) const {
    if (device < 0 || device >= device_count_)
      throw std::out_of_range("evpool: " + std::string(operation) + ": device ordinal " +
                              std::to_string(device) + " is out of range [0, " +
                              std::to_string(device_count_) + ")");
  }

  Backend backend_;
  unsigned event_flags_;
  std::size_t max_idle_;
  int device_count_ = 0;
  std::atomic<std::uint64_t> references_{1};
  ForkGuard fork_guard_;
  Arena arena_;
  std::unique_ptr<DeviceLists[]> devices_;
};

}  // namespace evpool::detail
