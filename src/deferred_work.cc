#include "evpool/deferred_work.h"

#include <atomic>

namespace evpool {
namespace detail {
namespace {

std::atomic<DeferredWork *> deferred_head{nullptr};

}  // namespace

void defer(DeferredWork &work) noexcept {
  DeferredWork *head = deferred_head.load(std::memory_order_relaxed);
  do {
    work.next_deferred_ = head;
    // Release: whoever takes the list sees what the deferring thread did before (its last use of
    // the object). Relaxed on failure: the retry rereads nothing but the head.
  } while (!deferred_head.compare_exchange_weak(head, &work, std::memory_order_release, std::memory_order_relaxed));
}

bool deferred_work_waiting() noexcept {
  // Relaxed: a hint; run_deferred_work_pending's exchange is what synchronises.
  return deferred_head.load(std::memory_order_relaxed) != nullptr;
}

void run_deferred_work_pending() noexcept {
  // Acquire: pairs with defer's release, for every node of the list taken. Until the list is
  // empty: work that runs may defer more (a graph-owned event whose lease was its pool's last).
  while (DeferredWork *work = deferred_head.exchange(nullptr, std::memory_order_acquire)) {
    while (work != nullptr) {
      DeferredWork *next = work->next_deferred_;  // before run(), which may delete it
      work->run();
      work = next;
    }
  }
}

}  // namespace detail

void run_deferred_work() noexcept { detail::run_deferred_work_pending(); }

}  // namespace evpool
