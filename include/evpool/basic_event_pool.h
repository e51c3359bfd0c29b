// evpool: BasicEventPool, a lock-free pool of events, one stack per device.
//
// Design rationale
// ----------------
// The design replaced (DALI's CUDAEventPool) keeps per-device intrusive lists of EventEntry nodes
// and a list of spare nodes, all behind one yielding spinlock; under contention it serialises every
// Get and Put of every device on that lock. Here the same structure is lock-free:
//
//   devices_[d].events: TaggedIndexStack of EventEntry nodes, each holding an idle event of d
//   devices_[d].spare:  TaggedIndexStack of EventEntry nodes holding nothing, for Puts to d
//   arena_:             the NodeArena that owns every node, and frees none before the pool dies
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
// in detail/tagged_index_stack.h and detail/node_arena.h. Of note for this pool: Get and Put move
// nodes between two LIFO stacks, which preserves the nodes' relative order, so an ABA on a head
// would be harmless were it not for Purge, which reverses a device's chain onto its spare stack.
// The 32-bit tag is what keeps that case safe (test/interleaving_test.cc finds the corruption with
// a 1-bit tag).
//
// After fork() the child must not hand out or destroy its parent's events: the first operation in
// a child forgets every idle event (detail/fork_guard.h), and the child starts with an empty pool.
//
// Errors leave everything as it was: every argument is checked before anything changes, Put takes
// ownership of the event only after the last step that can throw (a node allocation), and a
// failed create in Get holds nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/detail/node_arena.h"
#include "evpool/detail/tagged_index_stack.h"
#include "evpool/event_backend.h"
#include "evpool/pool_policy.h"

namespace evpool {

template <EventBackend Backend, class Policy = DefaultPoolPolicy>
class BasicEventPool {
 public:
  using backend_type = Backend;
  using event_type = typename Backend::event_type;
  using handle_type = typename Backend::handle_type;

  /// Creates an empty pool for the backend's devices; events will be created with `event_flags`.
  /// Throws std::invalid_argument for flags the backend rejects, and whatever the backend throws
  /// when it cannot count its devices (CUDAError where CUDA has no driver or no device).
  explicit BasicEventPool(Backend backend = Backend(),
                          unsigned event_flags = Backend::kDefaultFlags)
      : backend_(std::move(backend)), event_flags_(event_flags) {
    backend_.validate_flags(event_flags_);
    device_count_ = backend_.device_count();
    if (device_count_ <= 0)
      throw std::invalid_argument("evpool: the backend reports " + std::to_string(device_count_) +
                                  " devices; a pool needs at least one");
    devices_ = std::make_unique<DeviceLists[]>(static_cast<std::size_t>(device_count_));
  }

  BasicEventPool(const BasicEventPool &) = delete;
  BasicEventPool &operator=(const BasicEventPool &) = delete;

  /// Destroys every idle event. Events still held by callers are theirs; putting one back into a
  /// destroyed pool is undefined behaviour. Not thread-safe: no other call may run concurrently.
  ~BasicEventPool() { Purge(); }

  /// Returns an idle event of `device_id` (-1: the calling thread's current device), creating one
  /// with the pool's flags if none is idle.
  /// Thread-safe. Lock-free when an idle event exists; a miss calls the backend's create, which
  /// may block inside the driver.
  /// Throws std::out_of_range for a device outside [0, device_count()), and whatever the backend's
  /// create throws; the pool is unchanged in both cases.
  event_type Get(int device_id = -1) {
    forget_events_of_parent_process();
    const int device = resolve_device(device_id, "Get");
    DeviceLists &lists = devices_[device];
    const std::uint32_t index = lists.events.value.pop(arena_);
    if (index == detail::kNilIndex) return backend_.adopt(backend_.create(event_flags_, device), device);
    const handle_type handle = arena_[index].handle;
    lists.spare.value.push(index, arena_);
    return backend_.adopt(handle, device);
  }

  /// Returns `event` to the pool, filed under `device_id`; with -1, under the device the event
  /// records, or the calling thread's current device for an adopted event of unknown device.
  /// Thread-safe. Lock-free when a spare node exists; otherwise it allocates one node.
  /// Throws, before taking ownership (the caller still owns `event`):
  /// - std::invalid_argument if `event` is empty, or if `device_id` contradicts the event's device;
  /// - std::out_of_range if the device is outside [0, device_count());
  /// - std::bad_alloc if no node can be allocated.
  void Put(event_type &&event, int device_id = -1) {
    if (!event) throw std::invalid_argument("evpool: Put of an empty event");
    forget_events_of_parent_process();
    DeviceLists &lists = devices_[device_for_put(event, device_id)];
    std::uint32_t index = lists.spare.value.pop(arena_);
    if (index == detail::kNilIndex) index = arena_.allocate();
    arena_[index].handle = event.release();
    lists.events.value.push(index, arena_);
  }

  /// Destroys the events that are idle in the pool. Events Put concurrently with a Purge may stay.
  /// Thread-safe and lock-free; may run concurrently with Get, Put and other Purges. Never throws.
  void Purge() noexcept {
    forget_events_of_parent_process();
    drain_idle_events(/*destroy=*/true);
  }

  /// Number of devices, fixed at construction. Thread-safe, wait-free.
  int device_count() const noexcept { return device_count_; }

  /// The flags events are created with. Thread-safe, wait-free.
  unsigned event_flags() const noexcept { return event_flags_; }

  /// Nodes allocated so far: the most events that were ever idle at once, which bounds the
  /// pool's bookkeeping memory. Thread-safe, wait-free.
  std::size_t node_count() const noexcept { return arena_.allocated(); }

 private:
  template <class T>
  using Atomic = typename Policy::template atomic<T>;

  // One pooled event, or a spare node (then `handle` is stale and meaningless). Each node has its
  // 128 bytes to itself: nodes of different devices (and of different threads' events) lie side
  // by side in the arena, and Get and Put write them, so sharing a line would make threads that
  // share nothing else contend. The cost is 128 bytes per event the pool ever held idle at once.
  struct alignas(detail::kFalseSharingRange) EventEntry {
    handle_type handle{};
    Atomic<std::uint32_t> next{detail::kNilIndex};
  };
  static_assert(sizeof(EventEntry) == detail::kFalseSharingRange);
  using Arena = detail::NodeArena<EventEntry, Policy::template atomic>;
  using Stack =
      detail::TaggedIndexStack<Policy::template atomic, Policy::tag_bits, typename Policy::backoff>;

  struct DeviceLists {
    detail::CacheLinePadded<Stack> events;
    detail::CacheLinePadded<Stack> spare;
  };
  static_assert(sizeof(DeviceLists) == 2 * detail::kFalseSharingRange,
                "each head alone on its own 128 bytes");

  // Moves every idle event's node to its device's spare list, destroying the event or, in a forked
  // child whose events belong to the parent, only forgetting it.
  void drain_idle_events(bool destroy) noexcept {
    for (int device = 0; device < device_count_; ++device) {
      DeviceLists &lists = devices_[device];
      const std::uint32_t first = lists.events.value.pop_all();
      if (first == detail::kNilIndex) continue;
      std::uint32_t last = first;
      for (std::uint32_t index = first; index != detail::kNilIndex;
           index = arena_[index].next.load(std::memory_order_relaxed)) {
        // The chain is ours alone since pop_all; relaxed reads of `next` are ordered by it.
        if (destroy) backend_.destroy(arena_[index].handle);
        last = index;
      }
      lists.spare.value.push_chain(first, last, arena_);
    }
  }

  void forget_events_of_parent_process() noexcept {
    fork_guard_.check([this] { drain_idle_events(/*destroy=*/false); });
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
  int device_count_ = 0;
  detail::ForkGuard fork_guard_;
  Arena arena_;
  std::unique_ptr<DeviceLists[]> devices_;
};

}  // namespace evpool
