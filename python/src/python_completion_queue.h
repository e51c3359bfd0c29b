// evpool's Python bindings: PythonCompletionQueue, a completion queue whose requests finish
// Python objects (a callback, a concurrent.futures.Future, an asyncio future).
//
// Design rationale
// ----------------
// The C++ queue (basic_completion_queue.h) calls each request's callback on its poller. A Python
// callback needs the GIL (free-threaded: an attached thread state), and taking it per request would
// make the poller contend with every Python thread once per completion. So the queue here is the
// C++ queue polled by its caller (CompletionPolling::kCaller), and the caller is a poller thread of
// this class: each pass's C++ callbacks only link the request's ticket into the pass's batch (no
// Python, no allocation). After the pass the poller files the batch's asyncio futures in their
// loops' inboxes, without the GIL (loop_inbox.h: each loop resolves its own, woken through an
// eventfd it watches), and takes the GIL once, only if the batch has other requests, to hand
// those to Python (evpool/_delivery.py), which calls the callbacks and resolves the
// concurrent.futures futures. No thread per request, and no lock but the GIL, taken at most once a
// batch, never for asyncio futures (but those of a loop that is gone, which it drops). Taking it
// for them too (through loop.call_soon_threadsafe) made the poller and a busy loop's thread wait
// for each other: on an H100 host, 64 tasks awaiting small kernels got 16.2 k completions a second,
// at a p50 of 3.8 ms.
//
// The poller waits as the C++ queue's own does (detail/poller_wait.h, reused): it polls without a
// pause while passes make progress, then spins for `spin_for`, then sleeps 1 us, 2 us, ... up to
// `max_sleep` while requests are in progress, and sleeps in the kernel, until a request rings the
// doorbell, when none is. What it counts as in progress is `outstanding_`: requests made and not
// yet delivered to Python.
//
// The GIL is released around every call that may wait: a request (the event's record, which may
// take driver locks; a thread's first request, which allocates), close() (which waits for the
// requests in progress to be delivered).
//
// Exactly once: a ticket is linked into a batch by the request's C++ callback, which the C++ queue
// runs exactly once, on the polling thread, and the poller delivers and frees each batch it took.
// A request refused (closed queue, a stream the backend refuses, no memory) is refused before its
// ticket reaches the queue, and its reference is dropped at once.
//
// Closing: close() stops new requests, waits until every request made is delivered, and joins the
// poller. A request and close() meet through two words, `outstanding_` and `closing_`, both
// sequentially consistent: a request raises `outstanding_`, then reads `closing_`; the poller
// reads `closing_`, then `outstanding_`, and stops only on (closing, 0). Of a request that read
// `closing_` false and a poller that read it true, the request's raise comes before the poller's
// read of `outstanding_` in the single total order, so the poller sees it and stays.
//
// fork(): the child has no poller. A queue made in the parent refuses every call in the child
// (RuntimeError); the package's default queue is replaced in the child (evpool/_api.py).
//
// Interpreter exit: a thread that takes the GIL while the interpreter finalizes is ended (with the
// GIL: pthread_exit, which aborts in the poller's noexcept frames) or parked for ever
// (free-threaded: the thread that joins the poller then hangs). So before finalization an atexit
// hook (evpool/_api.py) calls stop_taking_the_gil(): from then on a batch is dropped, its
// references leaked. The hook and the poller meet through two words, both sequentially
// consistent: the hook raises `no_gil_`, then waits while `in_gil_section_` is up; the poller
// raises `in_gil_section_`, then reads `no_gil_`. Either the poller sees the hook's word and takes
// no GIL, or the hook sees the poller's and waits until its delivery is over.
#pragma once

#include <nanobind/nanobind.h>
#include <cxxabi.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "evpool/basic_completion_queue.h"
#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/detail/poller_wait.h"
#include "evpool/detail/thread_cpu_time.h"
#include "loop_inbox.h"

namespace evpool::python {

namespace nb = nanobind;

/// What a request finishes; the numbers are evpool/_delivery.py's.
enum class Target : int {
  kCallback = 0,  ///< callback(error), error None or a CUDAError
  kFuture = 1,    ///< a concurrent.futures.Future
  kAsyncio = 2,   ///< an asyncio future, resolved by its loop from its inbox (loop_inbox.h)
};

/// Whether the interpreter is finalizing: no thread may take the GIL any more.
inline bool python_finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

/// `Traits` (a module's: evpool_module.cc, testing_module.cc) gives `completion_backend`,
/// `error_name(status)` and `inbox_before_wake` (LoopInbox's `BeforeWake`). Thread-safety:
/// request(), pending(), stats() and close() may be called from any threads at once; the
/// destructor, only once no other call runs (Python's dealloc).
template <class Traits>
class PythonCompletionQueue {
  using Backend = typename Traits::completion_backend;

 public:
  using stream_type = typename Backend::stream_type;
  using status_type = typename Backend::status_type;

 private:
  struct Ticket;

 public:
  /// Where the poller leaves an asyncio loop's finished requests (loop_inbox.h).
  using Inbox = LoopInbox<Ticket, typename Traits::inbox_before_wake>;

  /// Starts the poller. `deliver` is evpool._delivery.deliver. Throws std::invalid_argument for
  /// options the C++ queue refuses, std::system_error if the thread cannot start. Requires the GIL.
  PythonCompletionQueue(Backend backend, CompletionQueueOptions options, nb::object deliver)
      : queue_(std::move(backend), caller_polled(options)), options_(options), deliver_(std::move(deliver)) {
    poller_ = new std::thread([this] { run_poller(); });
  }

  PythonCompletionQueue(const PythonCompletionQueue &) = delete;
  PythonCompletionQueue &operator=(const PythonCompletionQueue &) = delete;

  /// Closes the queue (see close()). Requires the GIL, which it releases while it waits.
  ~PythonCompletionQueue() {
    if (in_fork_child()) {
      poller_ = nullptr;  // the parent's thread, which the child does not have: never joined
      return;
    }
    closing_.store(true, std::memory_order_seq_cst);
    doorbell_.value.wake();
    nb::gil_scoped_release unlocked;
    join_poller();
  }

  /// Asks for `target` to be finished, as `kind` says, once the work enqueued on `stream` so far
  /// is done; an asyncio future (Target::kAsyncio) through `inbox`, its loop's. Requires the GIL;
  /// releases it while the request is recorded. Thread-safe; lock-free as the C++ queue's notify.
  /// Throws, keeping no reference to `target`: RuntimeError for a closed queue or one made before
  /// fork(), std::invalid_argument for a stream the backend refuses (a capturing CUDA stream) or an
  /// asyncio future without an inbox, std::bad_alloc.
  void request(stream_type stream, Target kind, nb::handle target, std::shared_ptr<Inbox> inbox = nullptr) {
    check_usable("request");
    if ((kind == Target::kAsyncio) != (inbox != nullptr))
      throw std::invalid_argument("evpool: an asyncio future is finished through its loop's inbox, and only it");
    auto *ticket = new Ticket{target.ptr(), kind, {}, nullptr, std::move(inbox)};
    target.inc_ref();  // the ticket's, dropped by the delivery (or below)
    // seq_cst, both: close()'s pairing (see the top).
    outstanding_.fetch_add(1, std::memory_order_seq_cst);
    try {
      if (closing_.load(std::memory_order_seq_cst)) throw_closed("request");
      nb::gil_scoped_release unlocked;
      queue_.notify(stream, LinkTicket{this, ticket});
    } catch (abi::__forced_unwind &) {
      // The thread is being ended (a daemon thread taking the GIL back while the interpreter
      // finalizes): notify() took the ticket, which is the queue's now. Not undone.
      throw;
    } catch (...) {
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
      target.dec_ref();
      delete ticket;
      throw;
    }
    doorbell_.value.ring();  // after the push, as the C++ queue's requesters (poller_wait.h)
  }

  /// Stops taking requests, waits until every request made so far is delivered (their callbacks
  /// called, their futures resolved or handed to their loops), and stops the poller. Requires the
  /// GIL, which it releases while it waits. Thread-safe; a second call waits as the first. Throws
  /// RuntimeError from one of the queue's own callbacks (it would wait for itself).
  void close() {
    if (in_fork_child()) return;  // nothing of the parent's to wait for
    if (std::this_thread::get_id() == poller_id_.load(std::memory_order_relaxed))
      throw std::logic_error("evpool: CompletionQueue.close() called from one of the queue's own callbacks, which would wait for "
                             "itself; close it from another thread");
    closing_.store(true, std::memory_order_seq_cst);
    doorbell_.value.wake();
    nb::gil_scoped_release unlocked;
    join_poller();
  }

  bool closed() const noexcept { return closing_.load(std::memory_order_relaxed); }

  /// Requests made and not yet handed to Python: 0 once a thread has seen the result of every
  /// request it made. Thread-safe, wait-free.
  std::uint64_t pending() const noexcept { return outstanding_.load(std::memory_order_relaxed); }

  /// The C++ queue's counts. Thread-safe, wait-free.
  CompletionQueueStats stats() const noexcept { return queue_.stats(); }

  /// CPU time the poller thread has used (zero once it stopped, and in a fork child). Thread-safe;
  /// waits while close() joins the poller: call it without the GIL.
  std::chrono::nanoseconds poller_cpu_time() const {
    if (in_fork_child()) return std::chrono::nanoseconds(0);  // the mutex may have been held at fork()
    const std::lock_guard lock(poller_mutex_);
    return poller_ == nullptr ? std::chrono::nanoseconds(0) : detail::thread_cpu_time(poller_->native_handle());
  }

  /// Batches handed to Python under the GIL (those of callbacks and concurrent.futures futures;
  /// asyncio futures go to their loops without it). Thread-safe, wait-free.
  std::uint64_t batches_under_gil() const noexcept {
    return batches_under_gil_.load(std::memory_order_relaxed);
  }

  /// From an atexit hook, before the interpreter finalizes: the poller takes the GIL no more (what
  /// completes later is dropped, its references leaked). Requires the GIL; releases it while it
  /// waits for a delivery in progress.
  void stop_taking_the_gil() {
    no_gil_.store(true, std::memory_order_seq_cst);
    nb::gil_scoped_release unlocked;
    while (in_gil_section_.load(std::memory_order_seq_cst))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  const CompletionQueueOptions &options() const noexcept { return options_; }
  Backend &backend() noexcept { return queue_.backend(); }

  /// Drops what `inbox` holds and refuses what comes later (the loop's inbox object is going).
  /// Requires the GIL.
  static void close_inbox(Inbox &inbox) noexcept { drop(inbox.close()); }

  /// Visits the futures `inbox` holds, for the garbage collector (tp_traverse). Requires the GIL.
  static int traverse_inbox(const Inbox &inbox, visitproc visit, void *arg) {
    return inbox.for_each_filed([&](const Ticket *ticket) {
      Py_VISIT(ticket->target);
      return 0;
    });
  }

  /// What `inbox` holds, oldest first, as [(future, status, name or None), ...]. Requires the GIL
  /// (the loop's thread). Throws std::bad_alloc (then the rest is dropped).
  static nb::list take_from_inbox(Inbox &inbox) {
    nb::list items;
    for (Ticket *ticket = inbox.take(); ticket != nullptr;) {
      std::unique_ptr<Ticket> taken(std::exchange(ticket, ticket->next));
      nb::object future = nb::steal(taken->target);
      try {
        items.append(
            nb::make_tuple(std::move(future), static_cast<long long>(taken->status), name_of(taken->status)));
      } catch (...) {
        drop(ticket);
        throw;
      }
    }
    return items;
  }

 private:
  // One request's Python side: its target (a strong reference), its loop's inbox for an asyncio
  // future, and once done, its status.
  struct Ticket {
    PyObject *target;
    Target kind;
    status_type status;
    Ticket *next;
    std::shared_ptr<Inbox> inbox;
  };

  static nb::object name_of(status_type status) {
    if (status == Backend::kSuccess) return nb::none();
    return nb::str(Traits::error_name(status).c_str());
  }

  // Under the GIL: drops the tickets of the chain and their references.
  static void drop(Ticket *chain) noexcept {
    while (chain != nullptr) {
      Ticket *ticket = std::exchange(chain, chain->next);
      Py_DECREF(ticket->target);
      delete ticket;
    }
  }

  // The request's C++ callback: links the ticket into the pass's batch. Runs on the polling
  // thread, one at a time (the C++ queue's promise), so the batch needs no synchronisation.
  struct LinkTicket {
    PythonCompletionQueue *queue;
    Ticket *ticket;
    void operator()(const status_type &status) const noexcept {
      ticket->status = status;
      *queue->batch_tail_ = ticket;
      queue->batch_tail_ = &ticket->next;
    }
  };

  static CompletionQueueOptions caller_polled(CompletionQueueOptions options) noexcept {
    options.polling = CompletionPolling::kCaller;
    return options;
  }

  bool in_fork_child() const noexcept { return fork_generation_ != detail::fork_generation(); }

  void check_usable(const char *call) const {
    if (in_fork_child())
      throw std::runtime_error(std::string("evpool: CompletionQueue.") + call +
                               ": the queue was made before fork(), and this child has no poller for it; make a "
                               "new queue in the child (evpool.default_queue() does so by itself)");
  }

  [[noreturn]] static void throw_closed(const char *call) {
    throw std::runtime_error(std::string("evpool: CompletionQueue.") + call +
                             ": the queue is closed; make a new one (or use evpool.default_queue())");
  }

  void join_poller() {
    const std::lock_guard lock(poller_mutex_);
    if (poller_ == nullptr) return;
    poller_->join();
    delete poller_;
    poller_ = nullptr;
  }

  void run_poller() noexcept {
    poller_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us, as the C++ queue's poller (poller_wait.h)
    detail::AdaptiveWait wait(options_.spin_for, options_.max_sleep);
    for (;;) {
      const std::size_t finished = queue_.poll();
      if (Ticket *batch = batch_head_) {
        batch_head_ = nullptr;
        batch_tail_ = &batch_head_;
        deliver(batch);
      }
      if (finished != 0) {
        wait.progressed();
        continue;
      }
      // seq_cst, both, and `closing_` first: see the top.
      const bool closing = closing_.load(std::memory_order_seq_cst);
      if (outstanding_.load(std::memory_order_seq_cst) == 0) {
        if (closing) return;
        doorbell_.value.announce_sleep();
        // seq_cst: the store-load pairing with request()'s raise and ring (poller_wait.h).
        if (outstanding_.load(std::memory_order_seq_cst) != 0 || closing_.load(std::memory_order_seq_cst)) {
          doorbell_.value.cancel_sleep();
          continue;
        }
        doorbell_.value.sleep(std::nullopt);
        wait.progressed();
      } else if (const std::optional<std::chrono::nanoseconds> pause = wait.after_idle_pass()) {
        doorbell_.value.announce_sleep();  // a request ends the pause early
        doorbell_.value.sleep(*pause);
      }
    }
  }

  // Files the batch's asyncio futures in their loops' inboxes, and hands the rest to Python under
  // one acquisition of the GIL (none if there is no rest); frees the tickets.
  void deliver(Ticket *batch) noexcept {
    batch = file_in_inboxes(batch);
    if (batch == nullptr) return;
    batches_under_gil_.fetch_add(1, std::memory_order_relaxed);
    // seq_cst, both: stop_taking_the_gil()'s pairing (store, then load, on each side).
    in_gil_section_.store(true, std::memory_order_seq_cst);
    if (no_gil_.load(std::memory_order_seq_cst) || python_finalizing())
      drop_without_the_gil(batch);
    else
      deliver_under_gil(batch);
    in_gil_section_.store(false, std::memory_order_seq_cst);
  }

  // The GIL may not be taken: the tickets go, their references leak.
  void drop_without_the_gil(Ticket *batch) noexcept {
    std::uint64_t count = 0;
    for (; batch != nullptr; ++count) delete std::exchange(batch, batch->next);
    outstanding_.fetch_sub(count, std::memory_order_seq_cst);
  }

  void deliver_under_gil(Ticket *batch) noexcept {
    nb::gil_scoped_acquire gil;
    std::uint64_t count = 0;
    // This queue's own Python object, held while the batch's references go: a callback may hold
    // the last reference to its queue, whose destructor, run here, would join the very thread it
    // runs on. None once closing: a queue being destroyed has no reference left for a callback to
    // hold (and one closed by close() is held by that call).
    nb::object self = closing_.load(std::memory_order_seq_cst) ? nb::object() : nb::find(*this);
    {
      nb::list items;
      while (batch != nullptr) {
        Ticket *ticket = std::exchange(batch, batch->next);
        nb::object target = nb::steal(ticket->target);
        const Target kind = ticket->kind;
        const status_type status = ticket->status;
        delete ticket;
        ++count;
        if (kind == Target::kAsyncio) continue;  // its loop's inbox is closed: the loop is gone
        try {
          items.append(nb::make_tuple(static_cast<int>(kind), std::move(target),
                                      static_cast<long long>(status), name_of(status)));
        } catch (nb::python_error &error) {
          error.discard_as_unraisable("evpool: preparing a completion for Python");
        } catch (const std::exception &) {  // out of memory: this one is not delivered
        }
      }
      // Before Python sees the batch: a thread that has seen one of its results reads pending()
      // without it. close() still waits for the delivery, which ends before the poller does.
      outstanding_.fetch_sub(count, std::memory_order_seq_cst);
      try {
        deliver_(items);
      } catch (nb::python_error &error) {
        error.discard_as_unraisable("evpool: delivering completions");
      }
    }
    // Then, if the last reference is this one, it is dropped on the main thread (Python's pending
    // calls), where the destructor closes the queue and joins this thread. If the call cannot be
    // queued, the queue leaks rather than destroy itself here. Open on a free-threaded interpreter:
    // another thread that drops its reference between the count's read and this drop leaves the
    // last one to this thread after all.
    if (self.is_valid() && Py_REFCNT(self.ptr()) == 1) [[maybe_unused]]
      const int queued = Py_AddPendingCall(&drop_reference, self.release().ptr());
  }

  static int drop_reference(void *object) {
    Py_DECREF(static_cast<PyObject *>(object));
    return 0;
  }

  // Without the GIL: files each asyncio future of the batch in its loop's inbox, a chain per
  // inbox, newest first (loop_inbox.h); returns the rest of the batch, in its order, with the
  // futures whose inbox is closed (to be dropped under the GIL).
  Ticket *file_in_inboxes(Ticket *batch) noexcept {
    Ticket *rest = nullptr, **rest_tail = &rest;
    while (batch != nullptr) {
      // One inbox's chain: this ticket's inbox, gathered from the batch (a batch is one pass's
      // completions, and a process has few loops: the scans are short).
      // Owned, not borrowed: once file() has published the chain, the loop may take it, drop its
      // tickets and its inbox object, and so the inbox, before file() writes the eventfd.
      const std::shared_ptr<Inbox> inbox = batch->inbox;
      if (inbox == nullptr) {
        *rest_tail = std::exchange(batch, batch->next);
        rest_tail = &(*rest_tail)->next;
        continue;
      }
      Ticket *newest = nullptr, *oldest = nullptr, *others = nullptr, **others_tail = &others;
      std::uint64_t in_chain = 0;
      for (Ticket *ticket = batch; ticket != nullptr;) {
        Ticket *next = ticket->next;
        if (ticket->inbox == inbox) {
          ticket->next = newest;
          newest = ticket;
          if (oldest == nullptr) oldest = ticket;
          ++in_chain;
        } else {
          *others_tail = ticket;
          others_tail = &ticket->next;
        }
        ticket = next;
      }
      *others_tail = nullptr;
      batch = others;
      // Before the loop can see them: a thread that has seen one of its results reads pending()
      // without it (see deliver()).
      outstanding_.fetch_sub(in_chain, std::memory_order_seq_cst);
      if (inbox->file(newest, oldest)) continue;
      outstanding_.fetch_add(in_chain, std::memory_order_seq_cst);  // closed: dropped under the GIL
      oldest->next = nullptr;
      *rest_tail = newest;
      rest_tail = &oldest->next;
    }
    *rest_tail = nullptr;
    return rest;
  }

  BasicCompletionQueue<Backend> queue_;
  const CompletionQueueOptions options_;
  const nb::object deliver_;
  const std::uint32_t fork_generation_ = detail::fork_generation();

  // Read by every request: a line of its own (poller_wait.h).
  detail::CacheLinePadded<detail::PollerDoorbell> doorbell_;
  std::atomic<std::uint64_t> outstanding_{0};
  std::atomic<bool> closing_{false};
  std::atomic<std::uint64_t> batches_under_gil_{0};
  std::atomic<bool> no_gil_{false}, in_gil_section_{false};

  // The poller's only (the C++ callbacks run on it).
  Ticket *batch_head_ = nullptr;
  Ticket **batch_tail_ = &batch_head_;

  mutable std::mutex poller_mutex_;  // joining, and reading the thread's clock meanwhile
  std::thread *poller_ = nullptr;
  std::atomic<std::thread::id> poller_id_{};
};

}  // namespace evpool::python
