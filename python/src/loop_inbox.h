// evpool's Python bindings: LoopInbox, where a completion queue's poller leaves the finished
// requests of one asyncio loop, without the GIL, for that loop's thread to resolve.
//
// Design rationale
// ----------------
// An asyncio future is resolved on its loop's thread. Handing it there through
// loop.call_soon_threadsafe takes the GIL on the poller, and a loop busy with many tasks holds the
// GIL whenever it runs Python: the poller then waits for it, until the loop's thread releases it
// or the interpreter's switch interval (5 ms) makes it, and the loop's thread waits in turn while
// the poller runs Python. So each loop that awaits completions gets an inbox: a lock-free stack
// of finished requests, and an eventfd that the loop watches (loop.add_reader). The poller files a
// pass's requests of that loop in one compare-and-swap, without the GIL, and writes the eventfd
// only if the inbox was empty; the loop's reader takes them all at once and resolves their futures
// on its own thread, under the GIL it holds anyway.
//
// No wake-up is lost, with any number of filers (every queue's poller files into the inbox of a
// loop that awaits its requests). The stack's head has one modification order. The loop resets
// the eventfd before it takes the stack: a request filed before the reset is taken by that take;
// one filed after the take finds the stack empty and writes the eventfd again; one filed between
// the two is taken by the take. So whenever the stack is not empty, the eventfd is set or a take
// is coming.
//
// Order: the poller links a pass's requests newest first, and pushes them as one chain, so that
// the stack holds every request newest first, and take() reverses it: futures are resolved in the
// order their requests finished.
//
// Closing: when the inbox's Python object goes (its loop closed, and its reader with it; or the
// garbage collector broke the cycle of a loop dropped unclosed, whose futures the inbox holds and
// which holds its inbox: for_each_filed() shows it those futures), the stack is swapped for a
// closed mark, and what it held is returned to be dropped under the GIL; a later file() finds the
// mark and refuses, and the poller drops those requests under the GIL. A filer owns the inbox
// while it files (its ticket's shared_ptr): once its chain is published, the loop may take it and
// drop the last other owner before the filer writes the eventfd.
//
// Memory orders: file()'s compare-and-swap releases the requests' contents (the poller wrote their
// statuses) to take()'s and close()'s exchanges, which acquire.
//
// `BeforeWake::before_wake()` runs between a chain's publication and the eventfd write it calls
// for: nothing in evpool's module, a pause in the tests' (testing_module.cc), which widen that
// window to show that the loop may close meanwhile.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <system_error>

namespace evpool::python {

/// LoopInbox's default `BeforeWake`: the eventfd is written as soon as the chain is published.
struct WakeAtOnce {
  static void before_wake() noexcept {}
};

/// `Node` has a `Node *next`. Thread-safety: file() by any number of threads at once (the queues'
/// pollers); take(), close() and for_each_filed() by the thread holding the GIL (the loop's
/// thread, the garbage collector), never at once; fd() by any. Progress: lock-free, but for the
/// eventfd's system calls.
template <class Node, class BeforeWake = WakeAtOnce>
class LoopInbox {
 public:
  /// Throws std::system_error if no eventfd can be had.
  LoopInbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0)
      throw std::system_error(errno, std::generic_category(), "evpool: eventfd for an asyncio loop's inbox");
  }
  LoopInbox(const LoopInbox &) = delete;
  LoopInbox &operator=(const LoopInbox &) = delete;
  ~LoopInbox() { ::close(fd_); }

  /// The descriptor the loop watches for reading.
  int fd() const noexcept { return fd_; }

  /// Files the chain `newest` ... `oldest` (linked by `next`, newest first), and wakes the loop if
  /// the inbox was empty. False if the inbox is closed: the caller keeps the chain.
  bool file(Node *newest, Node *oldest) noexcept {
    Node *head = head_.load(std::memory_order_relaxed);
    do {
      if (head == closed_mark()) return false;
      oldest->next = head;
      // Release: the chain's contents, to the take that acquires it.
    } while (!head_.compare_exchange_weak(head, newest, std::memory_order_release, std::memory_order_relaxed));
    if (head == nullptr) {
      BeforeWake::before_wake();
      const std::uint64_t one = 1;
      // Fails only if the counter would overflow (every take resets it): the loop is awake anyway.
      // The descriptor is open: the caller owns the inbox (see the top).
      [[maybe_unused]] const ssize_t written = write(fd_, &one, sizeof one);
    }
    return true;
  }

  /// Everything filed, oldest first (nullptr if nothing). Resets the wake-up first (see the top).
  Node *take() noexcept {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t read_back = read(fd_, &count, sizeof count);  // EAGAIN: not set
    // After close() nothing is taken: the mark stays (close() and take() never run at once, and
    // no file() writes the mark). Acquire: pairs with file()'s release.
    if (head_.load(std::memory_order_relaxed) == closed_mark()) return nullptr;
    Node *newest = head_.exchange(nullptr, std::memory_order_acquire);
    Node *oldest_first = nullptr;
    while (newest != nullptr) {
      Node *next = newest->next;
      newest->next = oldest_first;
      oldest_first = newest;
      newest = next;
    }
    return oldest_first;
  }

  /// Calls `visit(node)` for every node filed and not taken (for the garbage collector). Filers
  /// may push meanwhile: what they push is not visited, and what was pushed stays as it was.
  template <class Visit>
  int for_each_filed(Visit &&visit) const {
    for (Node *node = head_.load(std::memory_order_acquire); node != nullptr && node != closed_mark();
         node = node->next)
      if (const int stop = visit(node)) return stop;
    return 0;
  }

  /// Refuses every later file(); returns what was filed and not taken, newest first, to be dropped.
  Node *close() noexcept {
    Node *left = head_.exchange(closed_mark(), std::memory_order_acquire);  // pairs with file()
    return left == closed_mark() ? nullptr : left;
  }

 private:
  static Node *closed_mark() noexcept { return reinterpret_cast<Node *>(alignof(Node)); }

  std::atomic<Node *> head_{nullptr};
  const int fd_;
};

}  // namespace evpool::python
