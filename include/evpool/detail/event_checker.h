// evpool: the record a checked pool keeps of its events (pool_checks.h). Private to the library.
//
// Design rationale
// ----------------
// One table from handle to what the pool knows of it: the device it is filed under, and idle in
// the pool or outstanding with the stack of the Get that handed it out. One table for every
// device, not one per device: a handle idle under device 0 must be refused when it is put again
// under device 1 (the usual bug when an adopted event is put with device -1 from threads whose
// current devices differ), and only a table that sees every device can tell. One mutex guards it:
// checked mode is for finding bugs, and its cost is measured and documented rather than
// engineered away. Creation is
// the only way the driver reuses a handle value, so every destruction by the pool erases the
// handle's record (a later event with the same value starts afresh). Recording needs memory; when
// none can be had the record is dropped, and the event is then treated as one from outside.
#pragma once

#include <execinfo.h>

#include <array>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "evpool/pool_checks.h"

namespace evpool::detail {

template <class Handle>
class EventChecker {
 public:
  /// Thread-safety: every member may be called by any number of threads at once, except
  /// forget_all_in_child (a fork child's one forgetting thread). Blocking (one mutex).
  EventChecker() = default;

  /// `handle` was handed out by a Get or a lease: outstanding, with the caller's stack.
  void on_handed_out(int device, Handle handle) noexcept {
    Record record;
    record.device = device;
    record.idle = false;
    record.depth = ::backtrace(record.stack.data(), static_cast<int>(record.stack.size()));
    remember(handle, record);
  }

  /// `handle` is being put back under `device`. Throws DoublePutError if it is already idle in
  /// the pool, under any device; std::invalid_argument if the pool handed it out for another
  /// device. Nothing changed then.
  void on_put(int device, Handle handle) {
    std::lock_guard lock(lock_);
    auto found = records_.find(handle);
    if (found != records_.end()) {
      if (found->second.idle) throw_double_put(found->second.device, device, handle);
      if (found->second.device != device) throw_other_device(found->second.device, device, handle);
      found->second.idle = true;
      return;
    }
    try {
      records_.emplace(handle, Record{.device = device});  // an event from outside, now idle
    } catch (const std::bad_alloc &) {
    }
  }

  /// A Put that on_put accepted did not go through after all (the caller still owns the event).
  void on_put_undone(int device, Handle handle) noexcept { on_handed_out(device, handle); }

  /// `handle` was created straight into the depot (Reserve).
  void on_created_idle(int device, Handle handle) noexcept { remember(handle, Record{.device = device}); }

  /// The pool destroyed `handle`.
  void on_destroyed(Handle handle) noexcept {
    std::lock_guard lock(lock_);
    records_.erase(handle);
  }

  /// In a fork() child, whose first call forgets the parent's events: the records too. A parent's
  /// thread may have held the lock at the fork, so the lock and the table are made anew.
  void forget_all_in_child() noexcept {
    records_.~Records();
    ::new (&records_) Records();
    lock_.~mutex();
    ::new (&lock_) std::mutex();
  }

  /// The events still outstanding, per device, each with the stack of the Get that handed it out;
  /// empty if there are none.
  std::string describe_outstanding(int devices) {
    std::ostringstream text;
    std::lock_guard lock(lock_);
    for (int device = 0; device < devices; ++device) {
      std::size_t outstanding = 0;
      for (const auto &entry : records_)
        outstanding += !entry.second.idle && entry.second.device == device ? 1 : 0;
      if (outstanding == 0) continue;
      text << "  device " << device << ": " << outstanding << " outstanding\n";
      for (const auto &[handle, record] : records_) {
        if (record.idle || record.device != device) continue;
        text << "    event " << handle_text(handle) << ", got at:\n";
        char **symbols = ::backtrace_symbols(record.stack.data(), record.depth);
        for (int frame = 0; frame < record.depth; ++frame)
          text << "      " << (symbols != nullptr ? symbols[frame] : "?") << "\n";
        std::free(symbols);
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

  [[noreturn, gnu::cold]] static void throw_double_put(int idle_under, int device, Handle handle) {
    throw DoublePutError("evpool: Put of event " + handle_text(handle) + " under device " + std::to_string(device) +
                         ", which is already idle in the pool under device " + std::to_string(idle_under) +
                         " (a double Put); the pool keeps its copy, and the caller's duplicate was emptied "
                         "without destroying the handle");
  }

  [[noreturn, gnu::cold]] static void throw_other_device(int handed_out_for, int device, Handle handle) {
    throw std::invalid_argument("evpool: Put of event " + handle_text(handle) + " under device " +
                                std::to_string(device) + ", but the pool handed it out for device " +
                                std::to_string(handed_out_for) + "; the caller still owns the event");
  }

  std::mutex lock_;
  Records records_;
};

}  // namespace evpool::detail
