// evpool: UniqueLease, a handle that cannot be forgotten or returned to the wrong place.
//
// A move-only owner of one pooled handle that puts it back into the pool it came from, under the
// handle's own device, when it dies. It may outlive the BasicHandlePool it came from: the pool's
// state lives on until the last lease ends (leases are counted in the thread caches, see
// detail/handle_pool_core.h), and a handle whose pool is gone is retired, to be destroyed by the
// deferred work (deferred_work.h).
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/fork_guard.h"
#include "evpool/handle_backend.h"

namespace evpool {

/// Thread-safety: like any value; distinct leases of one pool may be used and destroyed by any
/// threads at once, also after the pool is gone.
template <class Core>
class UniqueLease {
 public:
  using owner_type = typename Core::owner_type;
  using handle_type = typename Core::handle_type;

  UniqueLease() noexcept = default;
  UniqueLease(UniqueLease &&other) noexcept
      : core_(std::exchange(other.core_, nullptr)), owner_(std::move(other.owner_)),
        fork_generation_(other.fork_generation_) {}
  UniqueLease &operator=(UniqueLease &&other) noexcept {
    if (this != &other) {
      reset();
      core_ = std::exchange(other.core_, nullptr);
      owner_ = std::move(other.owner_);
      fork_generation_ = other.fork_generation_;
    }
    return *this;
  }
  ~UniqueLease() { reset(); }

  /// The handle, for recording and waiting; the lease keeps ownership.
  handle_type get() const noexcept { return owner_.get(); }
  operator handle_type() const noexcept { return owner_.get(); }  // NOLINT: like CUDAEvent
  int device_id() const noexcept { return owner_.device_id(); }
  explicit operator bool() const noexcept { return static_cast<bool>(owner_); }

  /// Takes the handle out of the lease; the caller owns it and the pool forgets it (under a cap, its
  /// place too: to give it back, PutForeign, which takes a place again; pool_cap.h).
  owner_type release() noexcept {
    if (core_ != nullptr && fork_generation_ == detail::fork_generation()) core_->let_go(owner_.device_id());
    owner_type owner = std::move(owner_);
    reset();
    return owner;
  }

  /// Returns the handle to its pool now. Never throws, and makes no backend call: if the pool
  /// cannot take it back (it is gone, or over its idle limit), the handle is retired. A handle
  /// leased before fork() is not returned in the child (its handle belongs to the parent) but
  /// forgotten.
  void reset() noexcept { end(/*idle=*/false); }

  /// As reset(), the caller vouching that no work is pending on the handle: it waited for all
  /// of it and enqueued nothing since. A pool whose handles can be busy (streams) then hands the
  /// handle to this thread's next Get of the same device without asking the backend, unless
  /// anything else reached the top of this thread's cache in between: another hand-back or Get of
  /// this thread, or a flush or purge of the cache (FlushThreadCache, Trim, Purge, a Get at the
  /// cap); and not where the hand-back bypasses the cache (no caches, checked mode, a purge in
  /// progress). Vouching falsely breaks Get's promise that no work is pending on a stream it
  /// hands out. For other pools the same as reset().
  void reset_known_idle() noexcept { end(/*idle=*/true); }

  /// Whether the lease was begun before a fork() of this process and this is the child: its
  /// handle is the parent's, and ending the lease only forgets it.
  bool from_parent_process() const noexcept {
    return core_ != nullptr && fork_generation_ != detail::fork_generation();
  }

 private:
  template <HandleBackend, class>
  friend class BasicHandlePool;

  void end(bool idle) noexcept {
    if (core_ == nullptr) return;
    const bool parents_handle = from_parent_process();
    std::exchange(core_, nullptr)->end_lease(std::move(owner_), parents_handle, idle);
  }

  UniqueLease(Core &core, owner_type &&owner) noexcept
      : core_(&core), owner_(std::move(owner)), fork_generation_(detail::fork_generation()) {}

  Core *core_ = nullptr;
  owner_type owner_;
  std::uint32_t fork_generation_ = 0;
};

}  // namespace evpool
