// evpool: the record a checked pool keeps of its handles (pool_checks.h). Private to the library.
//
// Design rationale
// ----------------
// One table from handle to what the pool knows of it: the device it is filed under, and idle in
// the pool or outstanding with the stack of the Get that handed it out. One table for every
// device, not one per device: a handle idle under device 0 must be refused when it is put again
// under device 1 (the usual bug when an adopted handle is put with device -1 from threads whose
// current devices differ), and only a table that sees every device can tell. One mutex guards it:
// checked mode is for finding bugs, and its cost is measured and documented rather than
// engineered away. Creation is
// the only way the driver reuses a handle value, so every destruction by the pool erases the
// handle's record (a later handle with the same value starts afresh). Recording needs memory; when
// none can be had the record is dropped, and the handle is then treated as one from outside.
//
// Across pools. A Put of a handle that another pool handed out (and has not had back) or holds
// idle must be refused too: accepted, the two pools would hand one handle to two holders. The
// owner cannot tell: CUDAEvent and CUDAStream record a device, not a pool, and a bare handle
// wrapped by the caller (an adopted one) records nothing, yet an adopted handle is exactly the case
// to catch when another pool handed it out, and to accept when no pool did. So the checked pools
// ask each other: each one's checker is on a process-wide list of the checkers of its handle type,
// and a Put of a handle this pool has no record of asks every other checker on the list, under
// that checker's own lock. Handles are compared by value, which CUDA keeps unique among live events
// and streams; a handle its holder destroyed instead of putting back (checked mode reports it as
// outstanding) therefore still names its pool until that pool is destroyed. The list costs
// unchecked pools nothing, and a checked Put of an unknown handle one lookup per checked pool.
// Pools whose code was compiled into different shared objects with hidden symbols may keep
// different lists, and do not see each other.
//
// The list's lock is never taken while a checker's lock is held, and a walk holds it while it
// locks each checker in turn: so no two locks are ever waited for in both orders, and a checker
// leaves the list (its destructor) only when no walk is on it. A fork() child may inherit the list
// locked by a thread that does not exist there: the lock word holds the fork generation of its
// holder, and a thread takes over a hold of another generation (the holder's copy, resumed where
// the fork came from a signal handler on its thread, then finds it taken and leaves it). A
// checker that has not yet forgotten its parent's records in the child is skipped: its lock may be
// a vanished thread's, and its records are of the parent's handles.
#pragma once

#include <execinfo.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "evpool/detail/fork_guard.h"
#include "evpool/pool_checks.h"

namespace evpool::detail {

template <class Handle>
class HandleChecker {
 public:
  /// Thread-safety: every member may be called by any number of threads at once, except
  /// forget_all_in_child (a fork child's one forgetting thread). Blocking (its own mutex, and the
  /// list of checkers: see the rationale).
  /// `noun` names the handles in error messages ("event", "stream"); a string literal.
  explicit HandleChecker(const char *noun) noexcept : noun_(noun) {
    const ListLock list;
    next_ = checkers_;
    checkers_ = this;
  }
  ~HandleChecker() {
    const ListLock list;
    for (HandleChecker **link = &checkers_; *link != nullptr; link = &(*link)->next_)
      if (*link == this) {
        *link = next_;
        break;
      }
  }
  HandleChecker(const HandleChecker &) = delete;
  HandleChecker &operator=(const HandleChecker &) = delete;

  /// `handle` was handed out by a Get or a lease: outstanding, with the caller's stack.
  void on_handed_out(int device, Handle handle) noexcept {
    Record record;
    record.device = device;
    record.idle = false;
    record.depth = ::backtrace(record.stack.data(), static_cast<int>(record.stack.size()));
    remember(handle, record);
  }

  /// `handle` is being put back under `device`. Throws DoublePutError if it is already idle in
  /// the pool, under any device, or in another checked pool; std::invalid_argument if the pool
  /// handed it out for another device, or another checked pool handed it out. Nothing changed then.
  void on_put(int device, Handle handle) {
    {
      std::lock_guard lock(lock_);
      if (const auto found = records_.find(handle); found != records_.end())
        return put_back(found->second, device, handle);
    }
    // Unknown here, and asked of the others without this pool's lock (see the rationale).
    if (const std::optional<Record> elsewhere = record_in_another_pool(handle)) {
      if (elsewhere->idle) throw_idle_in_another_pool(elsewhere->device, device, handle);
      throw_handed_out_by_another_pool(*elsewhere, device, handle);
    }
    std::lock_guard lock(lock_);
    try {
      // A handle from outside, now idle; unless a Put of the same handle came first meanwhile.
      if (const auto [found, added] = records_.try_emplace(handle, Record{.device = device}); !added)
        put_back(found->second, device, handle);
    } catch (const std::bad_alloc &) {
    }
  }

  /// A Put that on_put accepted did not go through after all (the caller still owns the handle).
  void on_put_undone(int device, Handle handle) noexcept { on_handed_out(device, handle); }

  /// `handle` was created straight into the depot (Reserve).
  void on_created_idle(int device, Handle handle) noexcept { remember(handle, Record{.device = device}); }

  /// The pool destroyed `handle`.
  void on_destroyed(Handle handle) noexcept {
    std::lock_guard lock(lock_);
    records_.erase(handle);
  }

  /// In a fork() child, whose first call forgets the parent's handles: the records too. A parent's
  /// thread may have held the lock at the fork, so the lock and the table are made anew.
  void forget_all_in_child() noexcept {
    records_.~Records();
    ::new (&records_) Records();
    lock_.~mutex();
    ::new (&lock_) std::mutex();
    // Release: a walk that sees the child's generation (acquire) sees the lock and table anew.
    generation_.store(fork_generation(), std::memory_order_release);
  }

  /// The handles still outstanding, per device, each with the stack of the Get that handed it out;
  /// empty if there are none.
  std::string describe_outstanding(int devices) {
    // Copied under the lock and described after it: describing a stack takes the dynamic loader's
    // lock (dladdr), which a thread in dlclose may hold while a plugin's destructor Puts a handle
    // into this pool, waiting for our lock.
    std::vector<std::pair<Handle, Record>> outstanding;
    {
      std::lock_guard lock(lock_);
      for (const auto &entry : records_)
        if (!entry.second.idle) outstanding.push_back(entry);
    }
    std::ostringstream text;
    for (int device = 0; device < devices; ++device) {
      const auto on_device = [device](const auto &entry) { return entry.second.device == device; };
      const auto count = std::count_if(outstanding.begin(), outstanding.end(), on_device);
      if (count == 0) continue;
      text << "  device " << device << ": " << count << " outstanding\n";
      for (const auto &[handle, record] : outstanding) {
        if (record.device != device) continue;
        text << "    " << noun_ << " " << handle_text(handle) << ", got at:\n";
        text << describe_stack(record.stack.data(), record.depth, "      ");
      }
    }
    return text.str();
  }

 private:
  static constexpr std::size_t kStackFrames = 8;
  struct Record {
    int device = 0;
    bool idle = true;
    int depth = 0;
    std::array<void *, kStackFrames> stack{};
  };
  using Records = std::unordered_map<Handle, Record>;

  // A Put of a handle the pool knows: refused as on_put says, or it is idle again.
  void put_back(Record &record, int device, Handle handle) {
    if (record.idle) throw_double_put(record.device, device, handle);
    if (record.device != device) throw_other_device(record.device, device, handle);
    record.idle = true;
  }

  // What another checked pool of this process records of `handle`, if any does.
  std::optional<Record> record_in_another_pool(Handle handle) const {
    const ListLock list;
    for (const HandleChecker *other = checkers_; other != nullptr; other = other->next_) {
      // Acquire: pairs with forget_all_in_child's release.
      if (other == this || other->generation_.load(std::memory_order_acquire) != fork_generation()) continue;
      std::lock_guard lock(other->lock_);
      if (const auto found = other->records_.find(handle); found != other->records_.end())
        return found->second;
    }
    return std::nullopt;
  }

  void remember(Handle handle, const Record &record) noexcept {
    std::lock_guard lock(lock_);
    try {
      records_.insert_or_assign(handle, record);
    } catch (const std::bad_alloc &) {
      records_.erase(handle);
    }
  }

  static std::string handle_text(Handle handle) {
    std::ostringstream text;
    text << handle;
    return text.str();
  }

  [[noreturn, gnu::cold]] void throw_double_put(int idle_under, int device, Handle handle) {
    throw DoublePutError(std::string("evpool: Put of ") + noun_ + " " + handle_text(handle) +
                         " under device " + std::to_string(device) +
                         ", which is already idle in the pool under device " + std::to_string(idle_under) +
                         " (a double Put); the pool keeps its copy, and the caller's duplicate was emptied "
                         "without destroying the handle");
  }

  [[noreturn, gnu::cold]] void throw_other_device(int handed_out_for, int device, Handle handle) {
    throw std::invalid_argument(std::string("evpool: Put of ") + noun_ + " " + handle_text(handle) +
                                " under device " + std::to_string(device) +
                                ", but the pool handed it out for device " + std::to_string(handed_out_for) +
                                "; the caller still owns the " + std::string(noun_));
  }

  [[noreturn, gnu::cold]] void throw_idle_in_another_pool(int idle_under, int device, Handle handle) {
    throw DoublePutError(std::string("evpool: Put of ") + noun_ + " " + handle_text(handle) +
                         " under device " + std::to_string(device) +
                         ", which is idle in another checked pool under device " + std::to_string(idle_under) +
                         " (a double Put); that pool keeps its copy, and the caller's duplicate was emptied "
                         "without destroying the handle");
  }

  [[noreturn, gnu::cold]] void throw_handed_out_by_another_pool(const Record &record, int device, Handle handle) {
    std::string text = std::string("evpool: Put of ") + noun_ + " " + handle_text(handle) + " under device " +
                       std::to_string(device);
    text += " into a pool that never handed it out: another checked pool handed it out for device ";
    text += std::to_string(record.device) + " and has not had it back; the caller still owns the " +
            std::string(noun_) + ". Got at:\n";
    text += describe_stack(record.stack.data(), record.depth, "  ");
    text.pop_back();  // the message ends without a newline
    throw std::invalid_argument(text);
  }

  // The list's lock (see the rationale): 0 free, else the holder's fork generation plus 1.
  class ListLock {
   public:
    ListLock() noexcept {
      for (std::uint64_t held = word_.load(std::memory_order_relaxed);;) {
        // Acquire on success: what the previous holder did under the lock is visible to us.
        if (held != mine_ &&
            word_.compare_exchange_weak(held, mine_, std::memory_order_acquire, std::memory_order_relaxed))
          return;
        if (held == mine_) {  // held in this process: wait for it
          std::this_thread::yield();
          held = word_.load(std::memory_order_relaxed);
        }
      }
    }
    ~ListLock() {
      // Release: publishes what we did under the lock. Only our own hold: in a fork child the
      // lock may have been taken over since (see the rationale).
      std::uint64_t mine = mine_;
      (void)word_.compare_exchange_strong(mine, 0, std::memory_order_release, std::memory_order_relaxed);
    }
    ListLock(const ListLock &) = delete;
    ListLock &operator=(const ListLock &) = delete;

   private:
    const std::uint64_t mine_ = std::uint64_t{fork_generation()} + 1;
    static inline std::atomic<std::uint64_t> word_{0};
  };

  static inline HandleChecker *checkers_ = nullptr;  // the list, under ListLock
  HandleChecker *next_ = nullptr;                    // under ListLock
  const char *const noun_;                           // what the messages call a handle
  // The fork generation whose handles the records are of (see forget_all_in_child).
  std::atomic<std::uint32_t> generation_{fork_generation()};
  mutable std::mutex lock_;
  Records records_;
};

}  // namespace evpool::detail
