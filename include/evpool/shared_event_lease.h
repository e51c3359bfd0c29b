// evpool: SharedEventLease, a reference-counted pooled event (DALI's CUDASharedEvent, pooled).
//
// Every copy refers to the same event; the last copy to die returns it to its pool. The count
// lives in the event's own pool node (see detail/event_pool_core.h), so a shared lease allocates
// no control block, and a copy costs one relaxed increment on a line no other event uses. Like
// UniqueEventLease it holds a reference on the pool's core and may outlive its BasicEventPool.
#pragma once

#include <cstdint>
#include <utility>

#include "evpool/detail/node_arena.h"
#include "evpool/event_backend.h"

namespace evpool {

template <class Core>
class SharedEventLease {
 public:
  using handle_type = typename Core::handle_type;

  SharedEventLease() noexcept = default;
  SharedEventLease(const SharedEventLease &other) noexcept : core_(other.core_), node_(other.node_) {
    if (core_ != nullptr) core_->retain_node(node_);
  }
  SharedEventLease(SharedEventLease &&other) noexcept
      : core_(std::exchange(other.core_, nullptr)), node_(std::exchange(other.node_, detail::kNilIndex)) {}
  SharedEventLease &operator=(SharedEventLease other) noexcept {
    std::swap(core_, other.core_);
    std::swap(node_, other.node_);
    return *this;
  }
  ~SharedEventLease() { reset(); }

  /// The event's handle; every copy sees the same one.
  handle_type get() const noexcept { return core_ ? core_->node_handle(node_) : handle_type{}; }
  operator handle_type() const noexcept { return get(); }  // NOLINT: like CUDAEvent
  int device_id() const noexcept { return core_ ? core_->node_device(node_) : -1; }
  explicit operator bool() const noexcept { return core_ != nullptr; }

  /// Drops this copy's reference; the last one returns the event to its pool. Never throws.
  void reset() noexcept {
    if (core_ == nullptr) return;
    std::exchange(core_, nullptr)->release_node(std::exchange(node_, detail::kNilIndex));
  }

 private:
  template <EventBackend, class>
  friend class BasicEventPool;

  SharedEventLease(Core &core, std::uint32_t node) noexcept : core_(&core), node_(node) {}

  Core *core_ = nullptr;
  std::uint32_t node_ = detail::kNilIndex;
};

}  // namespace evpool
