// evpool: the record a checked pool keeps of its events (pool_checks.h). Private to the library.
//
// Design rationale
// ----------------
// Per device, a table from handle to what the pool knows of it: idle in the pool, or outstanding
// with the stack of the Get that handed it out. A mutex per device guards it: checked mode is for
// finding bugs, and its cost is measured and documented rather than engineered away. Creation is
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
#include <string>
#include <unordered_map>

#include "evpool/pool_checks.h"

namespace evpool::detail {

template <class Handle>
class EventChecker {
 public:
  explicit EventChecker(int devices) : devices_(std::make_unique<Device[]>(static_cast<std::size_t>(devices))) {}

  /// `handle` was handed out by a Get or a lease: outstanding, with the caller's stack.
  void on_handed_out(int device, Handle handle) noexcept {
    Record record;
    record.idle = false;
    record.depth = ::backtrace(record.stack.data(), static_cast<int>(record.stack.size()));
    remember(device, handle, record);
  }

  /// `handle` is being put back. Throws DoublePutError if it is already idle (nothing changed).
  void on_put(int device, Handle handle) {
    Device &table = devices_[device];
    std::lock_guard lock(table.lock);
    auto found = table.records.find(handle);
    if (found != table.records.end() && found->second.idle) throw_double_put(device, handle);
    if (found != table.records.end()) {
      found->second.idle = true;
      return;
    }
    try {
      table.records.emplace(handle, Record{});  // an event from outside, now idle
    } catch (const std::bad_alloc &) {
    }
  }

  /// A Put that on_put accepted did not go through after all (the caller still owns the event).
  void on_put_undone(int device, Handle handle) noexcept { on_handed_out(device, handle); }

  /// `handle` was created straight into the depot (Reserve).
  void on_created_idle(int device, Handle handle) noexcept { remember(device, handle, Record{}); }

  /// The pool destroyed `handle`.
  void on_destroyed(int device, Handle handle) noexcept {
    Device &table = devices_[device];
    std::lock_guard lock(table.lock);
    table.records.erase(handle);
  }

  /// In a fork() child, whose first call forgets the parent's events: the records too. A parent's
  /// thread may have held a lock at the fork, so the tables are made anew.
  void forget_all_in_child(int devices) noexcept {
    for (int device = 0; device < devices; ++device) {
      Device &table = devices_[device];
      table.~Device();
      ::new (&table) Device();
    }
  }

  /// The events still outstanding, per device, each with the stack of the Get that handed it out;
  /// empty if there are none.
  std::string describe_outstanding(int devices) {
    std::ostringstream text;
    for (int device = 0; device < devices; ++device) {
      Device &table = devices_[device];
      std::lock_guard lock(table.lock);
      std::size_t outstanding = 0;
      for (const auto &entry : table.records) outstanding += entry.second.idle ? 0 : 1;
      if (outstanding == 0) continue;
      text << "  device " << device << ": " << outstanding << " outstanding\n";
      for (const auto &[handle, record] : table.records) {
        if (record.idle) continue;
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
    bool idle = true;
    int depth = 0;
    std::array<void *, kStackFrames> stack{};
  };
  struct Device {
    std::mutex lock;
    std::unordered_map<Handle, Record> records;
  };

  void remember(int device, Handle handle, const Record &record) noexcept {
    Device &table = devices_[device];
    std::lock_guard lock(table.lock);
    try {
      table.records.insert_or_assign(handle, record);
    } catch (const std::bad_alloc &) {
      table.records.erase(handle);
    }
  }

  static std::string handle_text(Handle handle) {
    std::ostringstream text;
    text << handle;
    return text.str();
  }

  [[noreturn, gnu::cold]] static void throw_double_put(int device, Handle handle) {
    throw DoublePutError("evpool: Put of event " + handle_text(handle) + " of device " + std::to_string(device) +
                         ", which is already idle in the pool (a double Put); the pool keeps its copy, "
                         "and the caller's duplicate was emptied without destroying the handle");
  }

  std::unique_ptr<Device[]> devices_;
};

}  // namespace evpool::detail
