// evpool: the concept of a completion backend, the seam between a completion queue and the
// events and streams it watches.
//
// Design rationale
// ----------------
// BasicCompletionQueue (basic_completion_queue.h) is written against this concept, never against
// CUDA: CUDACompletionBackend (completion_queue.h) records pooled CUDA events and queries them;
// the tests' host backend (test/support/host_completion_backend.h) records host tokens on host
// "streams" whose work completes when the test says so. So every line of the queue runs, under
// ThreadSanitizer too, on machines without a GPU.
//
// A stream handle does not name one stream over time: CUDA hands a destroyed stream's handle to
// the next stream created, at once, while the destroyed one's work still runs (49 rounds of 50 on
// the H200 host). So record() also reports what names the stream for its whole life (CUDA 12's
// stream id), read when the request is recorded; the queue files requests under it, and never
// infers a request's completion from another's unless both carry the same id (stream_fifos.h).
//
// Completion signals (CompletionSignalBackend, optional). A query per completion contends for the
// driver's locks with every enqueuing thread. A backend that can also makes record() enqueue,
// behind the work, a write of a number into a word the queue gives it (SignalSlot): CUDA's
// cuStreamWriteValue64 into pinned, device-mapped host memory, allocated through
// allocate_signal_words(). The queue then reads the word instead of querying, and queries the
// event only rarely, to learn an error: a write behind failed work never lands
// (detail/signal_slots.h has the design, basic_completion_queue.h the reading). The host seam's
// "GPU" writes the word when the test completes the work, so the same code runs without a GPU.
//
// What a landed value promises (the memory order of the read): CUDA's stream memory write is
// ordered after the stream's earlier work, and by default (CU_STREAM_WRITE_VALUE_DEFAULT, which the
// backend uses) preceded by a memory fence with the semantics of __threadfence_system(), scoped
// to the stream: everything the work wrote is visible system-wide before the value is. The queue
// reads the word with an acquire load, so its callbacks, which run after that load, see the
// work's writes to host memory, and any CUDA call they make is ordered after the work as after a
// completed event.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

namespace evpool {

/// Where record() recorded a request's event: what the queue files the request under.
struct RecordedOn {
  /// The stream's device; -1 if it could not be found.
  int device = -1;
  /// What names the stream for its whole life, never reused for another stream (CUDA:
  /// cudaStreamGetId), as read when the event was recorded; empty if it could not be read. The
  /// queue orders and catches up only requests that carry the same id (stream_fifos.h): without
  /// one, each request completes on its own query.
  std::optional<std::uint64_t> stream_id;
  /// Whether record() enqueued the request's completion signal (CompletionSignalBackend): the
  /// queue then reads the signal's word instead of querying the event.
  bool signalled = false;
};

/// Where a request's completion signal goes: record() enqueues, behind the work, a write of
/// `value` into `*word` (a word from allocate_signal_words()). No word: no signal.
struct SignalSlot {
  std::uint64_t *word = nullptr;
  std::uint64_t value = 0;
};

/// What a completion backend provides:
/// - `stream_type` (hashable, trivially copyable), `status_type` (equality-comparable), and
///   `kSuccess`, the status of work that completed without error;
/// - `event_type`: the move-only owner of one pooled event (default-constructible: empty);
/// - `check_stream(stream)`: throws std::invalid_argument, naming the stream and why, if no
///   request can be made on it (CUDA: it is capturing); must not throw for an error that the
///   stream's work reports (record() returns those);
/// - `record(stream, event, on)`: gets an event from the backend's pool into `event`, on the
///   stream's device, and records it on `stream`; stores into `on` the stream's device and its
///   lifetime id (RecordedOn), also when the record fails, as far as they could be found, so
///   that a failed request keeps its place among the stream's others. Returns kSuccess, or the
///   error that prevented the record (a sticky device error, an invalid stream): the request
///   then completes with that status. Never throws;
/// - `query(event)`: the status of the work before the event, or nothing while it is pending.
///   Never throws;
/// - `give_back(event, device)`: returns the event to its pool (or destroys it if the pool
///   refuses it). Never throws.
/// Every member may be called from any number of threads at once.
template <class B>
concept CompletionBackend = std::is_trivially_copyable_v<typename B::stream_type> &&
    std::is_default_constructible_v<typename B::event_type> &&
    std::is_nothrow_move_constructible_v<typename B::event_type> &&
    requires(B &backend, typename B::stream_type stream, typename B::event_type &event, RecordedOn &on, int device) {
  { B::kSuccess } -> std::convertible_to<typename B::status_type>;
  backend.check_stream(stream);
  { backend.record(stream, event, on) }
  noexcept->std::same_as<typename B::status_type>;
  { backend.query(std::as_const(event)) }
  noexcept->std::same_as<std::optional<typename B::status_type>>;
  { backend.give_back(std::move(event), device) }
  noexcept;
};

/// A completion backend that can also signal completions through memory (see the top):
/// - `record(stream, event, on, signal)`: as record(stream, event, on), and if `signal.word` is
///   set and the stream's device can, enqueues on `stream` a write of `signal.value` into
///   `*signal.word`, ordered after the work enqueued so far (and before the event) and after a
///   system-wide fence of the work's writes, and sets `on.signalled`. A device or stream that
///   cannot leaves `on.signalled` false: the request is heard through its event. Never throws;
/// - `allocate_signal_words(count)`: `count` zeroed, 8-byte aligned words that the host reads and
///   every device of the backend can write (CUDA: pinned, portable, mapped host memory), or
///   nullptr where there is none (no device, no driver support): the queue then queries events.
///   Never throws;
/// - `free_signal_words(words, count)`: frees what allocate_signal_words() returned. Never throws.
/// The host reads a word with an acquire load, and expects a landed value to mean what a completed
/// event means: the work before it is done, and its writes are visible.
template <class B>
concept CompletionSignalBackend = CompletionBackend<B> &&
    requires(B &backend, typename B::stream_type stream, typename B::event_type &event, RecordedOn &on,
             const SignalSlot &signal, std::uint64_t *words, std::size_t count) {
  { backend.record(stream, event, on, signal) }
  noexcept->std::same_as<typename B::status_type>;
  { backend.allocate_signal_words(count) }
  noexcept->std::same_as<std::uint64_t *>;
  { backend.free_signal_words(words, count) }
  noexcept;
};

}  // namespace evpool
