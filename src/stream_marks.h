// evpool: where each pooled stream's handed-back work ends, read from host memory instead of asked
// of the driver. Private to the library.
//
// Design rationale
// ----------------
// A stream pool must not hand out a stream whose last holder's work is still pending. Asking the
// driver (cuStreamQuery) answers that, but under the driver's lock: on the H200 host, with 16
// threads that each memset 1 MiB, synchronise and hand back, one query per lease took 30% of the
// units a second and doubled their median latency, whether the query ran on the Get, on the
// hand-back or on a thread of its own (which managed 140 to 220 k queries a second at 16 threads
// and 22 k at 128, far behind the hand-backs). A stream memory write costs the hand-back one
// enqueue instead, and the Get nothing from the driver: when a holder hands a stream back, the
// pool enqueues on it a write of a new sequence number into pinned host memory (the stream's mark);
// the write runs once everything enqueued before it has completed, so the stream is idle exactly
// when its mark holds the last number written. Get reads it: one load (bench/results/h200,
// streams-tables.md, "synchronised", has the figures).
//
// Each stream the pool keeps has a record (StreamMark) in a table keyed by its handle
// (handle_table.h): added when the pool creates or adopts the stream, removed when it destroys the
// stream or lets it go (a lease's release()), so that no record outlives its handle (CUDA hands a
// destroyed stream's handle to the next stream at once). A record whose write may still be pending
// when it is removed (the pool destroys a busy stream: Trim, Purge) keeps its slot out of use for
// good: a late write must not land on another stream's mark. Where a mark cannot be had or
// written (no pinned memory, a driver without stream memory operations, a sticky error), the
// record says so and the pool asks the driver for that stream instead.
//
// A fork() child inherits the table and the slots, which belong to its parent's CUDA context: its
// first call that adds a record forgets them all (leaking them, as the parent's streams are).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "evpool/detail/handle_table.h"

namespace evpool::detail {

struct StreamMark {
  std::atomic<std::uint32_t> *reached = nullptr;  // pinned host memory the stream writes
  CUdeviceptr address = 0;                        // the same memory, as devices see it
  // The number the last hand-back enqueued, and whether it could: written by that hand-back's
  // thread, read by the thread the pool hands the stream to next (the pool orders the two).
  std::uint32_t expected = 0;
  bool written = true;
};

/// Thread-safety: every member may be called from any number of threads at once, for different
/// streams; for one stream, only by the thread that holds it (as the pool calls them).
class StreamMarks {
 public:
  StreamMarks() = default;
  StreamMarks(const StreamMarks &) = delete;
  StreamMarks &operator=(const StreamMarks &) = delete;
  ~StreamMarks();

  /// A stream the pool created: a fresh record (idle). Without a slot to be had, none (asked).
  void add(cudaStream_t stream) noexcept;
  /// The stream leaves the pool (destroyed, or let go): its record goes.
  void remove(cudaStream_t stream) noexcept;
  /// The holder hands `stream` back: the next number is enqueued to its mark (a stream the pool
  /// adopts gets its record here).
  void mark_handed_back(cudaStream_t stream) noexcept;
  /// 1 if the work before the last hand-back is pending, 0 if done, -1 if the mark cannot tell
  /// (ask the driver).
  int pending(cudaStream_t stream) const noexcept {
    const StreamMark *mark = records_.find(reinterpret_cast<std::uintptr_t>(stream));
    if (mark == nullptr || !mark->written) return -1;
    // Acquire: orders nothing of the host's; it reads what the device last wrote there.
    return mark->reached->load(std::memory_order_acquire) != mark->expected ? 1 : 0;
  }

 private:
  // A record with a slot of its own; nullptr if no slot can be had. Under `slots_lock_`.
  StreamMark *new_mark() noexcept;
  void forget_parents_slots() noexcept;

  HandleTable<StreamMark> records_;
  std::mutex slots_lock_;                // guards what follows
  std::vector<StreamMark *> free_marks_;  // records whose slot holds its last number
  std::vector<void *> chunks_;           // pinned allocations, freed with the marks
  std::uint32_t fork_generation_ = 0;
};

}  // namespace evpool::detail
