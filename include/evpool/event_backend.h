// evpool: the concept of an event backend, the seam between the pool and the events it pools.
//
// Design rationale
// ----------------
// All pool logic (BasicEventPool and the baselines it is measured against) is written against
// this concept, never against CUDA directly. CUDABackend supplies real CUDA events; HostBackend
// supplies host tokens with fault injection, so that every line of pool code runs, and is tested
// under ThreadSanitizer, on machines without a GPU.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <concepts>
#include <type_traits>
#include <utility>

namespace evpool {

/// What a backend provides:
/// - `handle_type`: the raw, trivially copyable event handle the pool stores in its nodes
///   (cudaEvent_t for CUDA);
/// - `event_type`: the move-only owner of one handle that Get returns and Put takes (CUDAEvent),
///   which remembers its device (-1 if unknown), gives its handle up with `release()` and tests
///   non-empty with `explicit operator bool`;
/// - `kDefaultFlags`, and `validate_flags(flags)`, which throws std::invalid_argument for flags
///   the backend cannot create events with;
/// - `create(flags, device)`: a new event on `device` (a valid ordinal), leaving the calling
///   thread's current device as it was; throws on failure;
/// - `destroy(handle)`: destroys an event, never throws;
/// - `adopt(handle, device)`: wraps a handle of `device` into an owning `event_type`;
/// - `device_count()` and `current_device()` (of the calling thread).
/// Backends are copyable; copies refer to the same underlying event source.
template <class B>
concept EventBackend = std::copy_constructible<B> && std::is_trivially_copyable_v<typename B::handle_type> &&
    std::movable<typename B::event_type> &&
    requires(B &backend, const B &const_backend, typename B::handle_type handle,
             typename B::event_type &event, unsigned flags, int device) {
  { B::kDefaultFlags } -> std::convertible_to<unsigned>;
  const_backend.validate_flags(flags);
  { backend.create(flags, device) } -> std::same_as<typename B::handle_type>;
  { backend.destroy(handle) }
  noexcept;
  { backend.adopt(handle, device) } -> std::same_as<typename B::event_type>;
  { const_backend.device_count() } -> std::same_as<int>;
  { const_backend.current_device() } -> std::same_as<int>;
  { event.release() } -> std::same_as<typename B::handle_type>;
  { std::as_const(event).device_id() } -> std::same_as<int>;
  static_cast<bool>(std::as_const(event));
};

}  // namespace evpool
