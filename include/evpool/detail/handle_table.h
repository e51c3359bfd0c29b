// evpool: a table from raw handles to what the library keeps about each, read without a lock.
// Private to the library.
//
// Design rationale
// ----------------
// A pool stores raw handles (cudaStream_t) in its magazines, and some backends keep a record per
// handle beside them (a stream's hand-back mark: cuda_stream_backend.h). Finding the record is on
// the path of every Get and hand-back, so it must cost a few loads and no lock; adding and removing
// records happens when a handle is created, adopted or destroyed, which calls the driver anyway.
// So readers probe an open-addressed table with acquire loads and never write, and writers take a
// mutex.
//
// Layout: a power-of-two array of entries, linear probing, at most half full counting removed
// entries (so a probe always meets an empty one and ends):
//
//   entry   | key (atomic, 8 bytes) | value (atomic pointer, 8 bytes) |
//   key     0: empty; 1: removed; else the handle (a pointer, never 0 or 1)
//
// A writer stores the value, then the key (release); a reader loads the key (acquire), then the
// value, which it so sees whole. When the table fills up, a writer builds a larger one and
// publishes it (release); the old one stays readable, unchanged, until the table is destroyed,
// since a reader may still be probing it. Retired arrays add up to less than the live one.
//
// The one rule for users: find(key) must not race with remove(key) or with the put(key) that
// replaces key's value. A pool ensures it by construction: the thread that looks a handle up holds
// it (it is handing it back, or it took it out of a magazine), and a handle is removed only once
// nobody holds it (it is being destroyed or let go of).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace evpool::detail {

template <class Value>
class HandleTable {
 public:
  static constexpr std::uintptr_t kEmpty = 0;
  static constexpr std::uintptr_t kRemoved = 1;

  HandleTable() : current_(new Array(kFirstCapacity)) {}
  HandleTable(const HandleTable &) = delete;
  HandleTable &operator=(const HandleTable &) = delete;
  ~HandleTable() { delete current_.load(std::memory_order_relaxed); }

  /// The value of `key`, or nullptr. Thread-safe, wait-free (a probe ends at an empty entry).
  Value *find(std::uintptr_t key) const noexcept {
    // Acquire: pairs with the release that published the array, so its entries are seen filled.
    const Array &array = *current_.load(std::memory_order_acquire);
    for (std::size_t i = array.home(key);; i = array.next(i)) {
      // Acquire: pairs with put()'s release of the key, which the value's store precedes.
      const std::uintptr_t found = array.entries[i].key.load(std::memory_order_acquire);
      if (found == key) return array.entries[i].value.load(std::memory_order_relaxed);
      if (found == kEmpty) return nullptr;
    }
  }

  /// Sets the value of `key` (not kEmpty or kRemoved), adding it if absent; returns the value it
  /// replaced, or nullptr. Thread-safe; blocking (a mutex). Throws std::bad_alloc, changing nothing.
  Value *put(std::uintptr_t key, Value *value) {
    std::lock_guard lock(writers_);
    Array *array = current_.load(std::memory_order_relaxed);
    if (Entry *entry = array->entry_of(key)) {
      Value *replaced = entry->value.load(std::memory_order_relaxed);
      entry->value.store(value, std::memory_order_relaxed);  // no reader races (see the top)
      return replaced;
    }
    if (2 * (array->used + 1) > array->capacity()) array = grow(*array);
    array->add(key, value);
    return nullptr;
  }

  /// Removes `key`; returns its value, or nullptr if it had none. Thread-safe; blocking (a mutex).
  Value *remove(std::uintptr_t key) noexcept {
    std::lock_guard lock(writers_);
    Entry *entry = current_.load(std::memory_order_relaxed)->entry_of(key);
    if (entry == nullptr) return nullptr;
    // Relaxed: no reader looks for this key any more (see the top); others pass over it.
    entry->key.store(kRemoved, std::memory_order_relaxed);
    --current_.load(std::memory_order_relaxed)->live;
    return entry->value.load(std::memory_order_relaxed);
  }

  /// Calls `visit(key, value)` for every key, and forgets them all. Not thread-safe: nothing else
  /// may use the table meanwhile (a fork child's first caller, or the owner's destructor).
  template <class Visit>
  void clear(Visit &&visit) {
    Array *array = current_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < array->capacity(); ++i) {
      const std::uintptr_t key = array->entries[i].key.load(std::memory_order_relaxed);
      if (key != kEmpty && key != kRemoved) visit(key, array->entries[i].value.load(std::memory_order_relaxed));
    }
    retired_.clear();
    current_.store(new Array(kFirstCapacity), std::memory_order_release);
    delete array;
  }

  /// Keys with a value now (exact once no writer runs).
  std::size_t size() const noexcept {
    std::lock_guard lock(writers_);
    return current_.load(std::memory_order_relaxed)->live;
  }

 private:
  static constexpr std::size_t kFirstCapacity = 64;

  struct Entry {
    std::atomic<std::uintptr_t> key{kEmpty};
    std::atomic<Value *> value{nullptr};
  };
  static_assert(sizeof(Entry) == 2 * sizeof(void *), "an entry is a key and a pointer");
  static_assert(std::atomic<std::uintptr_t>::is_always_lock_free && std::atomic<Value *>::is_always_lock_free);

  struct Array {
    explicit Array(std::size_t capacity) : mask(capacity - 1), entries(new Entry[capacity]) {}
    std::size_t capacity() const noexcept { return mask + 1; }
    // Handles are pointers to driver objects: their low bits are alignment, their high bits mostly
    // equal. Fibonacci hashing spreads what is left over the table.
    std::size_t home(std::uintptr_t key) const noexcept {
      return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    }
    std::size_t next(std::size_t i) const noexcept { return (i + 1) & mask; }
    // The entry holding `key`, or nullptr. Under the writers' mutex.
    Entry *entry_of(std::uintptr_t key) noexcept {
      for (std::size_t i = home(key);; i = next(i)) {
        const std::uintptr_t found = entries[i].key.load(std::memory_order_relaxed);
        if (found == key) return &entries[i];
        if (found == kEmpty) return nullptr;
      }
    }
    // Adds an absent key in the first empty or removed entry on its probe. Under the mutex, with
    // room (used + 1 <= capacity / 2).
    void add(std::uintptr_t key, Value *value) noexcept {
      std::size_t i = home(key);
      for (std::uintptr_t found; (found = entries[i].key.load(std::memory_order_relaxed)) != kEmpty &&
                                 found != kRemoved;)
        i = next(i);
      if (entries[i].key.load(std::memory_order_relaxed) == kEmpty) ++used;
      ++live;
      entries[i].value.store(value, std::memory_order_relaxed);
      // Release: a reader that sees the key sees the value (find()).
      entries[i].key.store(key, std::memory_order_release);
    }

    const std::size_t mask;
    const std::unique_ptr<Entry[]> entries;
    std::size_t used = 0;  // entries ever filled, removed ones included
    std::size_t live = 0;  // entries holding a key
  };

  // A larger array (or one as large, if removed entries filled this one) with the live keys,
  // published; the old one retires. Throws std::bad_alloc, changing nothing.
  Array *grow(Array &old) {
    const std::size_t capacity = std::bit_ceil(std::max(kFirstCapacity, 4 * (old.live + 1)));
    auto array = std::make_unique<Array>(capacity);
    retired_.reserve(retired_.size() + 1);  // may throw: nothing changed yet
    for (std::size_t i = 0; i < old.capacity(); ++i) {
      const std::uintptr_t key = old.entries[i].key.load(std::memory_order_relaxed);
      if (key != kEmpty && key != kRemoved) array->add(key, old.entries[i].value.load(std::memory_order_relaxed));
    }
    retired_.emplace_back(&old);
    // Release: a reader that loads the new array sees its entries (find()).
    current_.store(array.get(), std::memory_order_release);
    return array.release();
  }

  std::atomic<Array *> current_;
  std::vector<std::unique_ptr<Array>> retired_;  // read by readers that loaded them earlier
  mutable std::mutex writers_;
};

}  // namespace evpool::detail
