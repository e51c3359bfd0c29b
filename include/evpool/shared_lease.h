// evpool: SharedLease, a reference-counted pooled handle (DALI's CUDASharedEvent, pooled).
//
// Every copy refers to the same handle; the last copy to die returns it to its pool. The copies
// share one small control block (the handle and the count), which the pool recycles through the
// thread caches as it does handles (detail/shared_lease_block.h): a thread that has ended a shared
// lease begins its next one without allocating. A copy costs one relaxed increment on that block,
// which no other lease uses, and dropping a copy one decrement, except for the last, which only
// reads the count. Like UniqueLease it may outlive its BasicHandlePool.
#pragma once

#include <utility>

#include "evpool/detail/fork_guard.h"
#include "evpool/handle_backend.h"

namespace evpool {

/// Thread-safety: as std::shared_ptr: distinct copies may be used and destroyed by any threads at
/// once; one object must not be used by two threads at once without synchronisation.
template <class Core>
class SharedLease {
 public:
  using owner_type = typename Core::owner_type;
  using handle_type = typename Core::handle_type;

  SharedLease() noexcept = default;
  SharedLease(const SharedLease &other) noexcept : block_(other.block_) {
    // Relaxed: a new reference is made from an existing one (as in std::shared_ptr).
    if (block_ != nullptr) block_->references.fetch_add(1, std::memory_order_relaxed);
  }
  SharedLease(SharedLease &&other) noexcept : block_(std::exchange(other.block_, nullptr)) {}
  SharedLease &operator=(SharedLease other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }
  ~SharedLease() { reset(); }

  /// The handle; every copy sees the same one.
  handle_type get() const noexcept { return block_ ? block_->handle : handle_type{}; }
  operator handle_type() const noexcept { return get(); }  // NOLINT: like CUDAEvent
  int device_id() const noexcept { return block_ ? block_->device : -1; }
  explicit operator bool() const noexcept { return block_ != nullptr; }

  /// How many copies share the handle (0 for an empty lease). Like std::shared_ptr::use_count, a
  /// snapshot: other threads may copy or drop theirs meanwhile.
  long use_count() const noexcept {  // NOLINT(runtime/int): std::shared_ptr's type
    // Relaxed: a snapshot that orders nothing.
    return block_ ? static_cast<long>(block_->references.load(std::memory_order_relaxed)) : 0;  // NOLINT
  }

  /// Drops this copy's reference; the last one returns the handle to its pool (or forgets it in a
  /// fork child, or retires it if the pool is gone). Never throws; makes no backend call.
  void reset() noexcept {
    Block *block = std::exchange(block_, nullptr);
    if (block == nullptr || !drop_reference(*block)) return;
    const bool parents_handle = block->fork_generation != detail::fork_generation();
    block->core->end_shared_lease(block, parents_handle);  // recycles the block
  }

 private:
  template <HandleBackend, class>
  friend class BasicHandlePool;

  using Block = typename Core::SharedLeaseBlock;

  static SharedLease begin(Core &core, int device_id) {
    return SharedLease(core.begin_shared_lease(device_id));
  }

  explicit SharedLease(Block *block) noexcept : block_(block) {}

  // True if the caller held the last reference. A count of 1 read by a holder is final: only a
  // holder can add a reference, and the caller is the only one, so the last holder of a lease
  // that was never copied (or whose copies are gone) pays a load instead of a read-modify-write,
  // as libstdc++'s shared_ptr does.
  static bool drop_reference(Block &block) noexcept {
    // Acquire: pairs with the other holders' release below, so the last holder returns the handle
    // after every other holder's last use of it.
    if (block.references.load(std::memory_order_acquire) == 1) return true;
    // Acq_rel: release for the last holder's acquire (here or above); acquire if this is it.
    return block.references.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

  Block *block_ = nullptr;
};

}  // namespace evpool
