// evpool: UniqueEventLease, an event that cannot be forgotten or returned to the wrong place.
//
// A move-only owner of one pooled event that puts it back into the pool it came from, under the
// event's own device, when it dies. It may outlive the BasicEventPool it came from: the pool's
// state lives on until the last lease ends (leases are counted in the thread caches, see
// detail/event_pool_core.h), and an event whose pool is gone is retired, to be destroyed by the
// deferred work (deferred_work.h).
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/fork_guard.h"
#include "evpool/event_backend.h"

namespace evpool {

/// Thread-safety: like any value; distinct leases of one pool may be used and destroyed by any
/// threads at once, also after the pool is gone.
template <class Core>
class UniqueEventLease {
 public:
  using event_type = typename Core::event_type;
  using handle_type = typename Core::handle_type;

  UniqueEventLease() noexcept = default;
  UniqueEventLease(UniqueEventLease &&other) noexcept
      : core_(std::exchange(other.core_, nullptr)), event_(std::move(other.event_)),
        fork_generation_(other.fork_generation_) {}
  UniqueEventLease &operator=(UniqueEventLease &&other) noexcept {
    if (this != &other) {
      reset();
      core_ = std::exchange(other.core_, nullptr);
      event_ = std::move(other.event_);
      fork_generation_ = other.fork_generation_;
    }
    return *this;
  }
  ~UniqueEventLease() { reset(); }

  /// The event's handle, for recording and waiting; the lease keeps ownership.
  handle_type get() const noexcept { return event_.get(); }
  operator handle_type() const noexcept { return event_.get(); }  // NOLINT: like CUDAEvent
  int device_id() const noexcept { return event_.device_id(); }
  explicit operator bool() const noexcept { return static_cast<bool>(event_); }

  /// Takes the event out of the lease; the caller owns it and the pool forgets it.
  event_type release() noexcept {
    if (core_ != nullptr && fork_generation_ == detail::fork_generation()) core_->let_go(event_.device_id());
    event_type event = std::move(event_);
    reset();
    return event;
  }

  /// Returns the event to its pool now. Never throws, and makes no backend call: if the pool
  /// cannot take it back (it is gone, or over its idle limit), the event is retired. An event
  /// leased before fork() is not returned in the child (its handle belongs to the parent) but
  /// forgotten.
  void reset() noexcept {
    if (core_ == nullptr) return;
    const bool parents_event = fork_generation_ != detail::fork_generation();
    std::exchange(core_, nullptr)->end_lease(std::move(event_), parents_event);
  }

 private:
  template <EventBackend, class>
  friend class BasicEventPool;

  UniqueEventLease(Core &core, event_type &&event) noexcept
      : core_(&core), event_(std::move(event)), fork_generation_(detail::fork_generation()) {}

  Core *core_ = nullptr;
  event_type event_;
  std::uint32_t fork_generation_ = 0;
};

}  // namespace evpool
