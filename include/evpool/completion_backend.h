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
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <concepts>
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

}  // namespace evpool
