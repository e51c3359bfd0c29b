// evpool competitor: a faithful re-implementation of the design evpool replaces. Private;
// benchmarks and differential tests only.
//
// DALI's CUDAEventPool (dali/core/cuda_event_pool.cc), over the HandleBackend concept: per-device
// intrusive lists of heap-allocated EventEntry nodes plus one list of spare nodes, all behind one
// yielding spinlock (100 spins, then yield). Events are created outside the lock on a miss; a Put
// with no spare node drops the lock to allocate one. Get and Put with device -1 use the current
// device, as DALI does. Purge destroys the idle events and frees every node, spare ones included.
// Device ordinals are checked only by assert, as in DALI: this is a baseline, not an API.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "competitors/yielding_spinlock.h"
#include "evpool/handle_backend.h"

namespace evpool::competitors {

template <HandleBackend Backend>
class SpinlockEventPool {
 public:
  using owner_type = typename Backend::owner_type;

  explicit SpinlockEventPool(Backend backend = Backend(),
                             typename Backend::options_type options = Backend::kDefaultOptions)
      : backend_(std::move(backend)), options_(std::move(options)) {
    device_lists_.resize(static_cast<std::size_t>(backend_.device_count()));
  }
  SpinlockEventPool(const SpinlockEventPool &) = delete;
  SpinlockEventPool &operator=(const SpinlockEventPool &) = delete;
  ~SpinlockEventPool() { Purge(); }

  owner_type Get(int device_id = -1) {
    if (device_id == -1) device_id = backend_.current_device();
    owner_type event = GetFromPool(device_id);
    if (event) return event;
    owner_type made = backend_.adopt(backend_.create(options_, device_id), device_id);
    created_.fetch_add(1, std::memory_order_relaxed);
    return made;
  }

  void Put(owner_type &&event, int device_id = -1) {
    if (device_id < 0) device_id = backend_.current_device();
    assert(device_id >= 0 && device_id < static_cast<int>(device_lists_.size()));
    std::unique_lock<Lock> lock(lock_);
    EventEntry *entry = Pop(spare_);
    if (!entry) {
      lock.unlock();
      entry = new EventEntry{std::move(event), nullptr};
      lock.lock();
    } else {
      entry->event = std::move(event);
    }
    Push(device_lists_[static_cast<std::size_t>(device_id)], entry);
  }

  /// Events the pool has created, for a benchmark's report (not DALI's: it counts nothing).
  std::uint64_t created() const noexcept { return created_.load(std::memory_order_relaxed); }

  void Purge() {
    std::lock_guard<Lock> guard(lock_);
    DeleteList(spare_);
    for (EventEntry *&list : device_lists_) DeleteList(list);
  }

 private:
  using Lock = YieldingSpinlock<100>;

  struct EventEntry {
    owner_type event;
    EventEntry *next;
  };

  owner_type GetFromPool(int device_id) {
    assert(device_id >= 0 && device_id < static_cast<int>(device_lists_.size()));
    std::lock_guard<Lock> guard(lock_);
    EventEntry *entry = Pop(device_lists_[static_cast<std::size_t>(device_id)]);
    if (!entry) return owner_type();
    owner_type event = std::move(entry->event);
    Push(spare_, entry);
    return event;
  }

  static EventEntry *Pop(EventEntry *&head) {
    EventEntry *entry = head;
    if (entry) head = entry->next;
    return entry;
  }
  static void Push(EventEntry *&head, EventEntry *entry) {
    entry->next = head;
    head = entry;
  }
  static void DeleteList(EventEntry *&head) {
    while (head) delete std::exchange(head, head->next);
  }

  Backend backend_;
  typename Backend::options_type options_;
  Lock lock_;
  EventEntry *spare_ = nullptr;
  std::vector<EventEntry *> device_lists_;
  std::atomic<std::uint64_t> created_{0};  // a tally only: relaxed
};

}  // namespace evpool::competitors
