// evpool: the concept of a backend, the seam between the pool and the handles it pools.
//
// Design rationale
// ----------------
// All pool logic (BasicHandlePool and the baselines it is measured against) is written against
// this concept, never against CUDA directly. CUDAEventBackend supplies real CUDA events,
// CUDAStreamBackend real CUDA streams; HostBackend and HostStreamBackend supply host tokens with
// fault injection, so that every line of pool code runs, and is tested under ThreadSanitizer, on
// machines without a GPU. The pool is the same for every kind of handle: what differs between
// kinds (how a handle is created, whether it can be busy, how its device is found) is asked of the
// backend.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <concepts>
#include <type_traits>
#include <utility>

namespace evpool {

/// What a backend provides:
/// - `handle_type`: the raw, trivially copyable handle the pool stores in its nodes (cudaEvent_t,
///   cudaStream_t);
/// - `owner_type`: the move-only owner of one handle that Get returns and Put takes (CUDAEvent,
///   CUDAStream), which remembers its device (-1 if unknown), gives its handle up with `release()`
///   and tests non-empty with `explicit operator bool`;
/// - `options_type`: what a pool creates its handles with (CUDA events: their flags; CUDA streams:
///   flags and priority), `kDefaultOptions`, and `validate_options(options)`, which throws
///   std::invalid_argument for options the backend cannot create handles with, naming the value;
/// - `create(options, device)`: a new handle on `device` (a valid ordinal), leaving the calling
///   thread's current device as it was; throws on failure;
/// - `destroy(handle)`: destroys a handle, never throws;
/// - `adopt(handle, device)`: wraps a handle of `device` into an owning `owner_type`;
/// - `device_count()` and `current_device()` (of the calling thread).
/// Backends are copyable; copies refer to the same underlying source of handles.
///
/// Three members are optional, and a pool uses them only where the backend has them:
/// - `kHandleNoun`: what the pool's error messages call a handle ("event", "stream"; without it,
///   "handle"), a `static constexpr const char *`;
/// - `has_pending_work(handle)`: true while work enqueued on the handle has not completed (CUDA
///   streams). A pool never hands such a handle out (BusyHandleBackend below);
/// - `query_device(handle)`: the device of a handle adopted without one, asked of the handle
///   itself (cudaStreamGetDevice), or -1 if it cannot tell (DeviceQueryingBackend below).
template <class B>
concept HandleBackend = std::copy_constructible<B> && std::is_trivially_copyable_v<typename B::handle_type> &&
    std::movable<typename B::owner_type> && std::copyable<typename B::options_type> &&
    requires(B &backend, const B &const_backend, typename B::handle_type handle,
             typename B::owner_type &owner, const typename B::options_type &options, int device) {
  { B::kDefaultOptions } -> std::convertible_to<typename B::options_type>;
  const_backend.validate_options(options);
  { backend.create(options, device) } -> std::same_as<typename B::handle_type>;
  { backend.destroy(handle) }
  noexcept;
  { backend.adopt(handle, device) } -> std::same_as<typename B::owner_type>;
  { const_backend.device_count() } -> std::same_as<int>;
  { const_backend.current_device() } -> std::same_as<int>;
  { owner.release() } -> std::same_as<typename B::handle_type>;
  { std::as_const(owner).device_id() } -> std::same_as<int>;
  static_cast<bool>(std::as_const(owner));
};

/// A backend whose handles can be busy: work enqueued on one may still be pending when it is put
/// back. Never throws; may call the driver.
template <class B>
concept BusyHandleBackend = HandleBackend<B> && requires(const B &backend, typename B::handle_type handle) {
  { backend.has_pending_work(handle) }
  noexcept->std::same_as<bool>;
};

/// A backend that can tell a handle's device from the handle alone. Never throws; -1 if it cannot.
template <class B>
concept DeviceQueryingBackend = HandleBackend<B> && requires(const B &backend, typename B::handle_type handle) {
  { backend.query_device(handle) }
  noexcept->std::same_as<int>;
};

}  // namespace evpool
