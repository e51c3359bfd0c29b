// evpool bench: a bounded single-producer single-consumer ring that carries raw event handles (or
// shared leases, moved) from one thread to another in batches: the carrier of the handoff and
// lease-handoff workloads, and the way back of the `carrier` reference variant.
//
// Why batches: a ring that publishes every handle on its own moves its shared indices between the
// two cores once per event, and that capped every variant of handoff at 2-3 M/s on the H200,
// whatever the pool. Here the producer fills a whole batch in place and publishes it with one
// release store; the consumer takes it with one acquire load and gives the slot back once it has
// taken the last handle: one transfer each way per kBatch events, so what handoff measures is the
// pool. The `carrier` variant measures what is left: the ring alone.
//
// Layout: the two shared indices on 128 bytes each (the false-sharing range), each side's own
// cursor on another 128, and every batch slot aligned to 128, so that a side filling or emptying a
// batch writes nothing the other side reads until the batch changes hands.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>

#include "evpool/detail/cache_line_padded.h"

namespace evpool::bench {

template <class Handle, std::size_t kBatch, std::size_t kBatches>
class BatchRing {
 public:
  /// The most handles in the ring at once.
  static constexpr std::size_t kCapacity = kBatch * kBatches;

  /// Producer only. Moves `handle` into the batch being filled, and publishes the batch with its
  /// kBatch-th handle. False, with nothing changed (`handle` too), while every slot holds an
  /// unconsumed batch.
  bool try_push(Handle &&handle) noexcept {
    Cursor &cursor = producer_.value;
    // Acquire: the consumer's reads of the slot about to be refilled happened before.
    if (cursor.in_batch == 0 && cursor.batch - consumed_.value.load(std::memory_order_acquire) == kBatches)
      return false;
    slots_[cursor.batch % kBatches].handles[cursor.in_batch] = std::move(handle);
    if (++cursor.in_batch == kBatch) {
      cursor.in_batch = 0;
      // Release: publishes the batch's handles to the consumer.
      published_.value.store(++cursor.batch, std::memory_order_release);
    }
    return true;
  }

  /// Producer only. try_push, yielding while the ring is full.
  void push(Handle handle) noexcept {
    while (!try_push(std::move(handle))) std::this_thread::yield();
  }

  /// Consumer only. Takes the next handle of the oldest published batch, and hands the slot back
  /// to the producer with the batch's last one. False, with nothing changed, while no batch is
  /// published.
  bool try_pop(Handle &handle) noexcept {
    Cursor &cursor = consumer_.value;
    // Acquire: pairs with try_push's release, so that the batch's handles are visible.
    if (cursor.in_batch == 0 && published_.value.load(std::memory_order_acquire) == cursor.batch)
      return false;
    handle = std::move(slots_[cursor.batch % kBatches].handles[cursor.in_batch]);
    if (++cursor.in_batch == kBatch) {
      cursor.in_batch = 0;
      // Release: the producer may refill the slot once it sees this store.
      consumed_.value.store(++cursor.batch, std::memory_order_release);
    }
    return true;
  }

  /// Consumer only. try_pop, yielding while the ring is empty.
  Handle pop() noexcept {
    Handle handle{};
    while (!try_pop(handle)) std::this_thread::yield();
    return handle;
  }

 private:
  // One side's position: the batch it is in (counted from 0, never wrapping) and how far into it.
  struct Cursor {
    std::uint64_t batch = 0;
    std::size_t in_batch = 0;
  };
  struct alignas(detail::kFalseSharingRange) Slot {
    Handle handles[kBatch];
  };

  detail::CacheLinePadded<std::atomic<std::uint64_t>> published_{{0}};  // batches published
  detail::CacheLinePadded<std::atomic<std::uint64_t>> consumed_{{0}};   // batches emptied
  detail::CacheLinePadded<Cursor> producer_;
  detail::CacheLinePadded<Cursor> consumer_;
  Slot slots_[kBatches] = {};
};

}  // namespace evpool::bench
