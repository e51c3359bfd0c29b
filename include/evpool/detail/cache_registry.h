// evpool: the registry of one pool's thread caches, a list that a fork() child can always walk.
// Private to the library.
//
// Design rationale
// ----------------
// A pool keeps every thread cache it must be able to empty (Purge, Trim, its destructor) and to
// forget in a fork() child. Every change happens under the pool's registry lock; the one reader
// that does not take the lock is a fork child's forgetting thread, which walks the registry as
// fork() left it: possibly in the middle of a change by another thread, which does not exist in
// the child. A std::vector can be left mid-reallocation (its begin pointing into a freed buffer).
// A singly-linked list threaded through the caches changes by one pointer store at a time, and
// every one of those stores leaves a list that can be walked:
//
//   add(c):       c.next = head; head = c       (release: a walker that sees c sees c.next)
//   sweep(...):   *link = c.next; then c may be freed (no list reaches it any more)
//
// So a child meets a cache being added complete or not at all (it holds nothing yet), never meets
// a freed one, and always meets every other cache. What the caller does around a removal (the
// cache's lease count folded into the pool's) is not atomic with it; thread_cache_registry.h orders it
// so that a fork in between can only over-count leases in the child (a leak), never under-count.
//
// `Node` provides `registry_next()`, an `Atomic<Node *>&`. The pool uses std::atomic (its changes
// happen under a lock, outside what the deterministic scheduler needs to interleave); tests pass an
// atomic that snapshots the list at every store, as a fork would.
#pragma once

#include <atomic>

namespace evpool::detail {

/// Thread-safety: add, sweep and clear under the owner's lock; for_each under the lock, or by a
/// fork child's only running thread. None of them waits or allocates.
template <class Node, template <class> class Atomic>
class CacheRegistry {
 public:
  void add(Node &node) noexcept {
    // Relaxed: the node is not reachable yet. Release on the head: it publishes the link.
    node.registry_next().store(head_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    head_.store(&node, std::memory_order_release);
  }

  /// Calls visit(node) for each node; `visit` may free the node (its link is read first).
  template <class Visit>
  void for_each(Visit &&visit) noexcept {
    // Acquire: pairs with add's release, for a fork child that walks what another thread added.
    for (Node *node = head_.load(std::memory_order_acquire); node != nullptr;) {
      Node *next = node->registry_next().load(std::memory_order_acquire);
      visit(*node);
      node = next;
    }
  }

  /// Unlinks each node for which leave(node) returns true, then calls gone(node), which may free it.
  template <class Leave, class Gone>
  void sweep(Leave &&leave, Gone &&gone) noexcept {
    Atomic<Node *> *link = &head_;
    for (Node *node = link->load(std::memory_order_relaxed); node != nullptr;) {
      Node *next = node->registry_next().load(std::memory_order_relaxed);
      if (leave(*node)) {
        link->store(next, std::memory_order_relaxed);  // one store: the list is whole either way
        gone(*node);
      } else {
        link = &node->registry_next();
      }
      node = next;
    }
  }

  /// Forgets every node (the caller has let go of them, or does so after).
  void clear() noexcept { head_.store(nullptr, std::memory_order_relaxed); }

 private:
  Atomic<Node *> head_{nullptr};
};

}  // namespace evpool::detail
