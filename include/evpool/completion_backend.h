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
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

namespace evpool {

/// What a completion backend provides:
/// - `stream_type` (hashable, trivially copyable), `status_type` (equality-comparable), and
///   `kSuccess`, the status of work that completed without error;
/// - `event_type`: the move-only owner of one pooled event (default-constructible: empty);
/// - `check_stream(stream)`: throws std::invalid_argument, naming the stream and why, if no
///   request can be made on it (CUDA: it is capturing); must not throw for an error that the
///   stream's work reports (record() returns those);
/// - `record(stream, event, device)`: gets an event from the backend's pool into `event`, on the
///   stream's device (stored into `device`, or -1 if it could not be found), and records it on
///   `stream`. Returns kSuccess, or the error that prevented it (a sticky device error, an
///   invalid stream): the request then completes with that status. Never throws;
/// - `query(event)`: the status of the work before the event, or nothing while it is pending.
///   Never throws;
/// - `give_back(event, device)`: returns the event to its pool (or destroys it if the pool
///   refuses it). Never throws.
/// Every member may be called from any number of threads at once.
template <class B>
concept CompletionBackend = std::is_trivially_copyable_v<typename B::stream_type> &&
    std::is_default_constructible_v<typename B::event_type> &&
    std::is_nothrow_move_constructible_v<typename B::event_type> &&
    requires(B &backend, typename B::stream_type stream, typename B::event_type &event, int &device) {
  { B::kSuccess } -> std::convertible_to<typename B::status_type>;
  backend.check_stream(stream);
  { backend.record(stream, event, device) }
  noexcept->std::same_as<typename B::status_type>;
  { backend.query(std::as_const(event)) }
  noexcept->std::same_as<std::optional<typename B::status_type>>;
  { backend.give_back(std::move(event), device) }
  noexcept;
};

}  // namespace evpool
