// evpool: UniqueEventLease, an event that cannot be forgotten or returned to the wrong place.
//
// A move-only owner of one pooled event that puts it back into the pool it came from, under the
// event's own device, when it dies. It holds a reference on the pool's core, so it may outlive the
// BasicEventPool it came from: its event then returns to the core, which is destroyed, idle events
// and all, with its last reference.
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/fork_guard.h"
#include "evpool/event_backend.h"

namespace evpool {

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
    event_type event = std::move(event_);
    reset();
    return event;
  }

  /// Returns the event to its pool now. Never throws: if the pool cannot take it back (no memory
  /// for a node), the event is destroyed. An event leased before fork() is not returned in the
  /// child (its handle belongs to the parent) but forgotten.
  void reset() noexcept {
    if (core_ == nullptr) return;
    if (event_) {
      if (fork_generation_ != detail::fork_generation()) {
        (void)event_.release();
      } else {
        try {
          core_->Put(std::move(event_), -1);
        } catch (...) {
          event_ = event_type();
        }
      }
    }
    std::exchange(core_, nullptr)->release_reference();
  }

 private:
  template <EventBackend, class>
  friend class BasicEventPool;

  UniqueEventLease(Core &core, event_type &&event) noexcept
      : core_(&core), event_(std::move(event)), fork_generation_(detail::fork_generation()) {
    core_->acquire_reference();
  }

  Core *core_ = nullptr;
  event_type event_;
  std::uint32_t fork_generation_ = 0;
};

}  // namespace evpool
