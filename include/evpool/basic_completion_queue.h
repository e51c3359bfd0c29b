// evpool: BasicCompletionQueue, "tell me when the work enqueued so far on this stream is done".
//
// Design rationale
// ----------------
// A scheduler that orders work across streams must also learn when the work is done: to free
// buffers, finish futures, start what depends on it. The queue records a pooled event on the
// stream for each request and calls the request's callback, with the status the work ended with,
// once the event has completed; then it returns the event to its pool and marks the request's
// handle (BasicCompletion) done.
//
// Asking. Any number of threads ask at once, and asking takes no lock and writes no line that
// another requester writes: each thread pushes onto a channel of its own (request_channel.h),
// found through its directory of caches under the queue's id, as its event cache is found under
// a pool's (thread_cache_directory.h). The event comes from the thread's cache of the pool. A
// thread that cannot have a channel (its thread-local storage is being torn down, or it is out of
// memory) pushes onto the queue's shared channel: the same stack, with several pushers.
//
// Polling. One thread at a time polls (`polling`, a try-lock that requesters never touch): it
// takes every channel's requests, files them in FIFOs per thread and stream, and queries only
// the oldest unfinished request of each, and once that has completed, the newest, which may
// finish them all (stream_fifos.h). A stream handle names a stream only until it is destroyed, and
// CUDA gives the next stream the same handle at once, so a FIFO is keyed by the stream's lifetime
// id too, read by the backend when it records the request (completion_backend.h): a request is
// never reported done, nor its event given back, before its own work has completed, whatever
// handles the caller destroys and reuses. The poller is a thread the queue owns
// (CompletionPolling::kOwnThread), which waits adaptively between passes and sleeps when no
// request is in progress (poller_wait.h); or the caller's own event loop, calling poll()
// (CompletionPolling::kCaller). Callbacks run on the polling thread, one at a time, outside any
// lock but the poller's own: they may call CUDA, and may ask this queue for more completions
// (those go to the polling thread's channel, and are polled at the next pass).
//
// Hearing without asking the driver (CompletionSignal::kAuto, opt-in, with a backend that can:
// CompletionSignalBackend). The default is kEventQuery: each signalled request adds a driver call
// on the asking thread (the write, beside the event's record), and on the H100 host that cost the
// closed loop 57 to 60% of its completions a second (docs/completions.md). A query contends for
// the driver's locks with every enqueuing thread, and a saturated poller spends its pass on them. So each request also takes a slot, a
// 64-bit word of pinned host memory, from its thread's block (signal_slots.h), and the backend
// enqueues behind the work a write of a number into it (cuStreamWriteValue64); the poller reads
// the word where it would have queried the event: landed (the word holds the request's number or
// more), the request is done, with kSuccess, and catching up works as before (the newest
// request's word finishes its FIFO). Why the event is still recorded and queried, rarely: a write
// behind failed work never lands (a fault makes the context's error sticky, and the stream runs
// nothing more), so requests whose signals have not landed have their events queried, one query
// per device per `signal_query_interval` (1 ms by default; one per pass at 0), whatever the
// requests pending on it, each request asked in turn, in rounds (detail/signal_probes.h): a sticky error,
// which any query of the device reports, reaches its callback within about one interval, and
// work waited for costs one query a millisecond per device instead of one a pass per stream.
// Once an event has told an error, each pending request of that device is asked at once, in the
// same pass, for its own status. A request without a signal (its thread's 64 slots are all in flight, the shared channel,
// a device or stream that cannot, CompletionSignal::kEventQuery) is queried as before. The
// memory orders of the write and the read are in completion_backend.h and at the read below.
//
// Exactly once. A request is in exactly one place at a time: a channel, a FIFO (or, after an
// allocation failure, its channel's `unplaced` list), then finished. Only the poller moves it
// between them, and it finishes a request when it takes it out of its FIFO, before anything else
// can see it there. So each callback runs once, and each event goes back to its pool once.
//
// Misuse that would crash or hang is refused with an exception, before anything changes:
// - notify() with a callback that converts to false (a null function pointer, an empty
//   std::function): std::invalid_argument, before an event is taken. Taken, a null pointer
//   crashed the poller when it called it, and an empty std::function only threw
//   std::bad_function_call into the handle.
// - Completion::wait() for an unfinished request, inside a pass of the request's own queue (from
//   one of its callbacks): std::logic_error; only that pass could finish the request
//   (detail/polling_thread.h). Each pass marks its thread as polling the queue for that purpose.
//
// What happens at the edges:
// - A callback that throws: the exception is caught and kept in the request's handle
//   (callback_exception()); the event still goes back to its pool, the request is still done,
//   and the other callbacks run as usual. poll() never throws. So does a callback whose captures'
//   destruction throws (a capture with a noexcept(false) destructor, which the poller destroys
//   right after the call, outside any noexcept destructor: detail/completion_request.h).
// - Destroying the queue with requests in progress: the destructor waits for them, and runs their
//   callbacks, including requests that those callbacks make (a destruction left to the pass that
//   ran it: only those made before the destructor returned). Nothing is dropped. (A request whose
//   work never ends keeps the destructor waiting: as cudaStreamSynchronize would.)
// - fork(): the child's copy of the queue holds the parent's requests; they are the parent's to
//   finish, so the child's first call on the queue forgets them (never calling their callbacks,
//   never returning their events, which mean nothing in the child) and, for kOwnThread, starts a
//   poller of its own. The child may then use the queue as new. fork() from inside a callback is
//   not supported: the child would carry on with its parent's pass.
// - Process exit: a queue with static storage is destroyed like any other (its pending callbacks
//   run; CUDA that is already unloading reports cudaErrorCudartUnloading to them). A queue that is
//   never destroyed keeps its poller running until the process ends: its callbacks may then run
//   while static objects are being destroyed, so destroy a queue whose callbacks touch them.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "evpool/completion.h"
#include "evpool/completion_backend.h"
#include "evpool/detail/backoff.h"
#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/completion_request.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/detail/poller_wait.h"
#include "evpool/detail/polling_thread.h"
#include "evpool/detail/request_channel.h"
#include "evpool/detail/signal_probes.h"
#include "evpool/detail/signal_slots.h"
#include "evpool/detail/stream_fifos.h"
#include "evpool/detail/thread_cpu_time.h"
#include "evpool/detail/thread_cache_directory.h"

namespace evpool {

/// Who polls a completion queue.
enum class CompletionPolling {
  kOwnThread,  ///< a thread the queue starts, and stops in its destructor
  kCaller,     ///< the caller's own loop, through poll()
};

/// How a completion queue hears that a request's work is done.
enum class CompletionSignal {
  kAuto,        ///< a completion signal where the backend, device and stream can; the event elsewhere
  kEventQuery,  ///< always the request's event, queried by the poller
};

struct CompletionQueueOptions {
  CompletionPolling polling = CompletionPolling::kOwnThread;
  /// kOwnThread: how long the poller keeps polling without a pause after its last progress,
  /// before it starts sleeping between passes. At least 0.
  std::chrono::nanoseconds spin_for = std::chrono::microseconds(50);
  /// kOwnThread: the longest sleep between two passes while requests are in progress (the most a
  /// long-running piece of work can be seen late). Between 1 us and 1 s.
  std::chrono::nanoseconds max_sleep = std::chrono::microseconds(200);
  /// How the poller hears of completions (see the top). kAuto falls back to the events where no
  /// signal can be made (no driver entry point, a device without 64-bit stream memory operations).
  CompletionSignal signal = CompletionSignal::kEventQuery;
  /// kAuto: the time between two event queries on one device for requests whose signals have not
  /// landed (their only way to learn of an error; 0: one per pass), whatever the requests pending
  /// on it, and the least time a request's signal is missing before its event may be asked. An
  /// error heard has each pending request of its device asked once, at once. Between 0 and 1 s.
  std::chrono::nanoseconds signal_query_interval = std::chrono::milliseconds(1);
};

/// Counts since the queue was made. Exact when no call runs; otherwise each count is a recent value.
struct CompletionQueueStats {
  std::uint64_t requests = 0;             ///< requests the poller has taken from the requesters
  std::uint64_t completions = 0;          ///< requests done (callback run, event returned)
  std::uint64_t queries = 0;              ///< event queries made by the poller
  std::uint64_t signal_reads = 0;         ///< reads of a completion signal's word by the poller
  std::uint64_t signalled = 0;            ///< requests taken by the poller that carry a signal
  std::uint64_t passes = 0;               ///< polling passes
  std::uint64_t sleeps = 0;               ///< times the queue's poller thread went to sleep
  std::uint64_t callback_exceptions = 0;  ///< callbacks that threw, or whose captures' destruction threw
};

namespace detail {

// Everything a BasicCompletionQueue and its passes use, on the heap: a queue destroyed by one of
// its own callbacks hands it to the pass that ran the callback, which finishes the destruction
// once it is over (see the top). The public functions are BasicCompletionQueue's, documented there.
template <CompletionBackend Backend>
class CompletionQueueCore {
  using request_type = detail::CompletionRequest<Backend>;
  using channel_type = detail::RequestChannel<request_type>;

 public:
  using stream_type = typename Backend::stream_type;
  using status_type = typename Backend::status_type;
  using completion = BasicCompletion<Backend>;

  CompletionQueueCore(Backend backend, const CompletionQueueOptions &options)
      : backend_(std::move(backend)), options_(validated(options)) {
    if (options_.polling != CompletionPolling::kOwnThread) return;
    try {
      poller_ = new std::thread([this] { run_poller(); });
    } catch (...) {
      shared_channel_->let_go(channel_type::kQueue);
      throw;
    }
  }

  CompletionQueueCore(const CompletionQueueCore &) = delete;
  CompletionQueueCore &operator=(const CompletionQueueCore &) = delete;

  // The queue's destructor. Outside the queue's passes: waits for every request, then frees the
  // core. Inside one (a callback of the queue, or a poll() under one, destroys it): that pass
  // cannot end while this waits for it (the poller would join itself; a caller's drain would
  // wait for the `polling_` its own pass holds, for ever), and it goes on using the core after
  // the callback returns. So the pass's frame is marked (detail/polling_thread.h), and the pass
  // finishes the destruction once it is over: poll() before it returns, the poller thread
  // before it ends (run_poller). Nothing is shared with another thread here: the mark is on the
  // calling thread's own stack, read by the same thread.
  void close() noexcept {
    if (detail::hand_destruction_to_pass(id_)) return;
    finish_destruction();
  }

 private:
  static constexpr bool kCanSignal = CompletionSignalBackend<Backend>;

  ~CompletionQueueCore() {
    // Last: every request is finished, so no slot is in use (the blocks of channels still held by
    // their threads are never touched again).
    if constexpr (kCanSignal)
      signal_slots_.release([this](std::uint64_t *words, std::size_t count) noexcept {
        backend_.free_signal_words(words, count);
      });
  }

  // Waits for every request, stops the poller (joined, unless this thread is the poller, which
  // has detached itself) and frees the core. Returns how many requests it finished.
  std::size_t finish_destruction() noexcept {
    const std::size_t finished = destroy();
    delete this;
    return finished;
  }

  std::size_t destroy() noexcept {
    if (fork_guard_.stale()) [[unlikely]]
      forget_in_fork_child();
    if (poller_ != nullptr) {
      // seq_cst: the poller's announce_sleep and its load of `stopping_` pair with this store
      // and wake()'s exchange (poller_wait.h).
      stopping_.store(true, std::memory_order_seq_cst);
      doorbell_.value.wake();
      poller_->join();
      delete poller_;
    }
    // kCaller, a child whose poller could not start, or the poller itself, finishing a destruction.
    const std::size_t finished = drain();
    for (channel_type *channel = channels_.load(std::memory_order_acquire); channel != nullptr;) {
      channel_type *next = channel->next_channel;
      channel->let_go(channel_type::kQueue);
      channel = next;
    }
    shared_channel_->let_go(channel_type::kQueue);
    return finished;
  }

 public:
  template <class F>
  requires std::invocable < std::decay_t<F>
  &, const status_type & > completion notify(stream_type stream, F &&callback) {
    if (is_empty(callback)) [[unlikely]]
      throw std::invalid_argument(
          "evpool::CompletionQueue::notify: the callback is empty (it converts to false: a null function pointer, "
          "or an empty std::function or std::move_only_function), so there is nothing to call; ask without a "
          "callback, notify(stream), to hear only through the handle");
    backend_.check_stream(stream);
    return submit(new detail::CallbackRequest<Backend, std::decay_t<F>>(stream, std::forward<F>(callback)));
  }

  completion notify(stream_type stream) {
    backend_.check_stream(stream);
    return submit(new detail::SilentRequest<Backend>(stream));
  }

  std::size_t poll() noexcept {
    if (fork_guard_.stale()) [[unlikely]]
      forget_in_fork_child();
    // Acquire: pairs with the last poller's release, so this thread sees the FIFOs it left.
    if (polling_.value.exchange(true, std::memory_order_acquire)) return 0;
    const Pass pass = poll_once();
    polling_.value.store(false, std::memory_order_release);
    // A callback destroyed the queue: the rest is this call's, once its pass is over (close()).
    if (pass.queue_destroyed) [[unlikely]]
      return pass.finished + finish_destruction();
    return pass.finished;
  }

  CompletionQueueStats stats() const noexcept {
    CompletionQueueStats stats;
    stats.requests = requests_.load(std::memory_order_relaxed);
    stats.completions = completions_.load(std::memory_order_relaxed);
    stats.queries = queries_.load(std::memory_order_relaxed);
    stats.signal_reads = signal_reads_.load(std::memory_order_relaxed);
    stats.signalled = signalled_.load(std::memory_order_relaxed);
    stats.passes = passes_.load(std::memory_order_relaxed);
    stats.sleeps = sleeps_.load(std::memory_order_relaxed);
    stats.callback_exceptions = callback_exceptions_.load(std::memory_order_relaxed);
    return stats;
  }

  std::chrono::nanoseconds poller_cpu_time() const noexcept {
    return poller_ == nullptr ? std::chrono::nanoseconds(0) : detail::thread_cpu_time(poller_->native_handle());
  }

  const CompletionQueueOptions &options() const noexcept { return options_; }
  Backend &backend() noexcept { return backend_; }

 private:
  struct Pass {
    std::size_t finished = 0;
    bool took = false;             // filed new requests
    bool left_unplaced = false;    // some stay unfiled for want of memory: still work to do
    bool queue_destroyed = false;  // one of its callbacks destroyed the queue (close())
    bool progressed() const noexcept { return finished != 0 || took; }
    // Work in progress after the pass (only the pass changes what is filed or unplaced).
    bool busy(std::size_t in_progress) const noexcept { return in_progress != 0 || left_unplaced; }
  };

  static CompletionQueueOptions validated(const CompletionQueueOptions &options) {
    using std::chrono::nanoseconds;
    const auto where = std::string("evpool::CompletionQueue: ");
    if (options.polling != CompletionPolling::kOwnThread && options.polling != CompletionPolling::kCaller)
      throw std::invalid_argument(where + "polling is " + std::to_string(static_cast<int>(options.polling)) +
                                  ", neither kOwnThread (0) nor kCaller (1)");
    if (options.spin_for < nanoseconds(0))
      throw std::invalid_argument(where + "spin_for is " + std::to_string(options.spin_for.count()) +
                                  " ns; it must be at least 0");
    if (options.max_sleep < std::chrono::microseconds(1) || options.max_sleep > std::chrono::seconds(1))
      throw std::invalid_argument(where + "max_sleep is " + std::to_string(options.max_sleep.count()) +
                                  " ns; it must be between 1 us and 1 s");
    if (options.signal != CompletionSignal::kAuto && options.signal != CompletionSignal::kEventQuery)
      throw std::invalid_argument(where + "signal is " + std::to_string(static_cast<int>(options.signal)) +
                                  ", neither kAuto (0) nor kEventQuery (1)");
    if (options.signal_query_interval < nanoseconds(0) || options.signal_query_interval > std::chrono::seconds(1))
      throw std::invalid_argument(where + "signal_query_interval is " +
                                  std::to_string(options.signal_query_interval.count()) +
                                  " ns; it must be between 0 and 1 s");
    return options;
  }

  // Whether `callback` holds nothing to call. A function, named by reference, always has one.
  template <class G>
  static bool is_empty(const G &callback) noexcept {
    if constexpr (!std::is_function_v<G> && std::is_constructible_v<bool, const G &>)
      return !static_cast<bool>(callback);
    else
      return false;
  }

  completion submit(request_type *request) noexcept {
    request->queue = id_;
    channel_type &channel = this_threads_channel();
    if constexpr (kCanSignal) {
      SignalSlot signal;
      if (channel.signals != nullptr) {
        if (const std::optional<unsigned> slot = channel.signals->take()) {
          request->signal_block = channel.signals;
          request->signal_slot = *slot;
          signal = SignalSlot{channel.signals->word(*slot), channel.signals->next_value()};
        }
      }
      request->status = backend_.record(request->stream(), request->event(), request->recorded_on, signal);
      if (request->recorded_on.signalled) {
        request->signal = signal;
      } else if (request->signal_block != nullptr) {
        // No write was enqueued into the slot (a device or stream that cannot): back at once, or
        // requests heard through their events would hold the thread's slots while they run.
        request->signal_block->give_back(request->signal_slot);
        request->signal_block = nullptr;
      }
    } else {
      request->status = backend_.record(request->stream(), request->event(), request->recorded_on);
    }
    request->failed_to_record = request->status != Backend::kSuccess;
    channel.push(request);
    doorbell_.value.ring();
    return completion(request);
  }

  [[gnu::always_inline]] channel_type &this_threads_channel() noexcept {
    if (detail::ThreadCacheLink *link = detail::this_thread_caches.hinted(id_)) [[likely]]
      return static_cast<channel_type &>(*link);
    return find_or_add_channel();
  }

  [[gnu::noinline]] channel_type &find_or_add_channel() noexcept {
    if (fork_guard_.stale()) [[unlikely]]
      forget_in_fork_child();
    if (detail::this_thread_caches.torn_down) return *shared_channel_;
    if (detail::ThreadCacheLink *link = detail::find_thread_cache(id_))
      return static_cast<channel_type &>(*link);
    auto *channel = new (std::nothrow) channel_type(channel_type::kThread | channel_type::kQueue);
    if (channel == nullptr) return *shared_channel_;
    if constexpr (kCanSignal) {
      if (options_.signal == CompletionSignal::kAuto)
        channel->signals = signal_slots_.take(
            [this](std::size_t count) noexcept { return backend_.allocate_signal_words(count); });
    }
    if (!detail::add_thread_cache(id_, channel)) {
      signal_slots_.give_back(channel->signals);
      channel->let_go(channel_type::kThread | channel_type::kQueue);
      return *shared_channel_;
    }
    channel_type *head = channels_.load(std::memory_order_relaxed);
    do {
      channel->next_channel = head;
      // seq_cst: publishes the channel (release: a poller that sees it sees it initialised), and
      // is ordered before this thread's first push and its load of the doorbell: a poller that
      // announced its sleep, then read the list without this channel, is seen asleep by that load
      // (poller_wait.h). Release alone lets the poller's load miss the new channel while the
      // requester's load misses the announcement.
    } while (!channels_.compare_exchange_weak(head, channel, std::memory_order_seq_cst, std::memory_order_relaxed));
    return *channel;
  }

  // The polling pass; the caller holds `polling_`.
  Pass poll_once() noexcept {
    const detail::PollingHere polling_here(id_);  // for Completion::wait() in a callback
    Pass pass;
    passes_.store(passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    take(*shared_channel_, pass);
    channel_type *previous = nullptr;
    for (channel_type *channel = channels_.load(std::memory_order_acquire); channel != nullptr;) {
      channel_type *next = channel->next_channel;
      take(*channel, pass);
      if (channel->thread_gone() && channel->in_progress == 0 && channel->unplaced == nullptr &&
          !channel->has_requests()) {
        unlink(previous, *channel);
        signal_slots_.give_back(channel->signals);  // its requests are finished: every slot is free
        channel->let_go(channel_type::kQueue);
      } else {
        previous = channel;
      }
      channel = next;
    }
    std::int64_t now = 0;  // read once a pass, when a signal is first found missing
    // Set when an event tells a device's first error of the pass after some of the device's
    // requests were passed over: a sticky error fails every request of the device whose signal
    // has not landed, so the FIFOs are swept again, and those requests asked at once
    // (signal_probes.h). Waiting out the probe's turn, N failed requests heard their error only
    // after N intervals.
    bool sweep_again = false;
    const auto query = [this, &now, &sweep_again](request_type &request) noexcept -> std::optional<status_type> {
      if (request.failed_to_record) return request.status;
      if (request.signal.word != nullptr) {
        signal_reads_.store(signal_reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        // Acquire: the device's write of the value follows the work and a system-scope fence of
        // the work's writes (completion_backend.h; the host seam's completer stores with
        // release): the callbacks, which run after this load, see what the work wrote. The word
        // is never written by the host, so a value this high is the request's own write, or a
        // later one enqueued after it was finished (signal_slots.h).
        if (std::atomic_ref<std::uint64_t>(*request.signal.word).load(std::memory_order_acquire) >=
            request.signal.value)
          return Backend::kSuccess;
        // Not landed: pending, or behind failed work, whose write never lands. Only an event
        // tells which: one query per device per interval, whatever the requests pending on it
        // (see the top, and signal_probes.h).
        if (now == 0) now = steady_now();
        if (!probes_.may_query(request.device(), request.probe, now, options_.signal_query_interval.count()))
          return std::nullopt;
      }
      queries_.store(queries_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      const std::optional<status_type> status = backend_.query(std::as_const(request.event()));
      if (!status) {
        if (request.signal.word != nullptr) probes_.told_pending(request.probe);
      } else if (*status != Backend::kSuccess && probes_.error_heard(request.device())) {
        sweep_again = true;
      }
      return status;
    };
    // A request that was never recorded keeps its own status, also when the FIFO caught up.
    const auto finish_one = [this](request_type &request, const status_type &status) noexcept {
      finish(request, request.failed_to_record ? request.status : status);
    };
    pass.finished = fifos_.finish_completed(query, finish_one, Backend::kSuccess);
    // At most once per device: error_heard() says so only for a device's first error of the pass.
    while (std::exchange(sweep_again, false))
      pass.finished += fifos_.finish_completed(query, finish_one, Backend::kSuccess);
    probes_.end_pass();
    pass.queue_destroyed = polling_here.queue_destroyed();
    return pass;
  }

  // Files the channel's new requests (and any left unplaced) in their FIFOs, and tells `pass`
  // whether it filed any (out of memory, unfiled ones are no progress: the poller backs off) and
  // whether some stay unplaced.
  void take(channel_type &channel, Pass &pass) noexcept {
    request_type *pending = channel.unplaced;
    channel.unplaced = nullptr;
    if (request_type *taken = channel.take_all(); taken != nullptr) {
      if (pending == nullptr) {
        pending = taken;
      } else {
        request_type *last = pending;
        while (last->next != nullptr) last = last->next;
        last->next = taken;
      }
    }
    while (pending != nullptr) {
      request_type *next = pending->next;
      try {
        probes_.make_room_for(pending->device());
        fifos_.append(channel, *pending, /*in_channel_order=*/&channel != shared_channel_);
        pass.took = true;
        requests_.store(requests_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        if (pending->signal.word != nullptr)
          signalled_.store(signalled_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      } catch (const std::bad_alloc &) {
        pending->next = next;
        channel.unplaced = pending;  // the next pass tries again, in the same order
        pass.left_unplaced = true;
        break;
      }
      pending = next;
    }
  }

  // Unlinks `channel` (after `previous`, or the head) from the channel list. Requesters only push
  // at the head, so a failed compare-exchange means new channels came before it.
  void unlink(channel_type *previous, channel_type &channel) noexcept {
    if (previous == nullptr) {
      channel_type *head = &channel;
      // Acquire, also on failure: the walk below reads the links of channels pushed since, which
      // their pushers' release published.
      if (channels_.compare_exchange_strong(head, channel.next_channel, std::memory_order_acquire,
                                            std::memory_order_acquire))
        return;
      previous = head;
      while (previous->next_channel != &channel) previous = previous->next_channel;
    }
    previous->next_channel = channel.next_channel;
  }

  void finish(request_type &request, const status_type &status) noexcept {
    request.status = status;
    request.callback_exception = request.run_callback();
    if (request.callback_exception != nullptr)
      callback_exceptions_.store(callback_exceptions_.load(std::memory_order_relaxed) + 1,
                                 std::memory_order_relaxed);
    backend_.give_back(std::move(request.event()), request.device());
    // After the last read of the slot's word: the requester that takes it next enqueues a new
    // write (signal_slots.h).
    if (request.signal_block != nullptr) request.signal_block->give_back(request.signal_slot);
    completions_.store(completions_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    request.finish();
    request.release();  // the queue's reference
  }

  bool any_channel_has_requests() const noexcept {
    if (shared_channel_->has_requests()) return true;
    // seq_cst: the poller's half of the pairing with a new channel's push (find_or_add_channel).
    for (const channel_type *channel = channels_.load(std::memory_order_seq_cst); channel != nullptr;
         channel = channel->next_channel)
      if (channel->has_requests()) return true;
    return false;
  }

  void run_poller() noexcept {
    prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us (poller_wait.h); a failure only coarsens sleeps
    detail::AdaptiveWait wait(options_.spin_for, options_.max_sleep);
    for (;;) {
      const Step step = poll_and_decide(wait, /*announce=*/true);
      if (step.action == Step::kStop) return;
      if (step.action == Step::kQueueDestroyed) [[unlikely]] {
        // One of this pass's callbacks destroyed the queue (close()): this thread finishes the
        // destruction, and no thread is left to join it. `poller_` was written before any request
        // was made, and this thread saw a request, through its channel's release and acquire.
        poller_->detach();
        delete std::exchange(poller_, nullptr);
        finish_destruction();
        return;  // the core is gone
      }
      if (step.action == Step::kSleep) {
        sleeps_.store(sleeps_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        doorbell_.value.sleep(step.sleep);
      }
    }
  }

  // Polls until nothing is in progress and no channel holds a request (the destructor). Returns
  // how many requests it finished. Its passes never end in kQueueDestroyed: the queue is already
  // being destroyed, and a second destruction is the caller's error.
  std::size_t drain() noexcept {
    detail::AdaptiveWait wait(options_.spin_for, options_.max_sleep);
    std::size_t finished = 0;
    for (;;) {
      const Step step = poll_and_decide(wait, /*announce=*/false);
      finished += step.finished;
      if (step.action == Step::kStop) return finished;
      if (step.action == Step::kSleep && step.sleep) std::this_thread::sleep_for(*step.sleep);
    }
  }

  struct Step {
    enum Action { kPollAgain, kSleep, kStop, kQueueDestroyed } action = kPollAgain;
    std::optional<std::chrono::nanoseconds> sleep;  // kSleep: how long; none: until woken
    std::size_t finished = 0;                       // requests the pass finished
  };

  // One pass, and what to do next. Everything that reads the channel list runs under `polling_`:
  // a pass may unlink and free a channel. With `announce`, the sleep is announced on the
  // doorbell before the channels are looked at once more (poller_wait.h); `stopping_` ends the
  // loop once nothing is in progress. Without it (drain), the loop ends the same way.
  Step poll_and_decide(detail::AdaptiveWait &wait, bool announce) noexcept {
    // Acquire/release: as in poll().
    if (polling_.value.exchange(true, std::memory_order_acquire)) {  // a caller polls now
      std::this_thread::yield();
      return {};
    }
    const Pass pass = poll_once();
    Step step;
    step.finished = pass.finished;
    if (pass.queue_destroyed) [[unlikely]] {
      polling_.value.store(false, std::memory_order_release);
      step.action = Step::kQueueDestroyed;
      return step;
    }
    const bool in_progress = pass.busy(fifos_.in_progress());
    if (pass.progressed()) {
      wait.progressed();
    } else {
      if (in_progress) {
        step.sleep = wait.after_idle_pass();
      } else {
        wait.progressed();  // nothing to wait for: the next request starts a fresh spin
      }
      if (!in_progress || step.sleep) {
        if (announce) doorbell_.value.announce_sleep();
        // seq_cst: the second half of the doorbell's and the stop's store-load pairs (poller_wait.h).
        const bool stop = !announce || stopping_.load(std::memory_order_seq_cst);
        if (any_channel_has_requests()) {
          if (announce) doorbell_.value.cancel_sleep();
        } else if (stop && !in_progress) {
          if (announce) doorbell_.value.cancel_sleep();
          step.action = Step::kStop;
        } else {
          step.action = Step::kSleep;
        }
      } else {
        detail::cpu_relax();
      }
    }
    polling_.value.store(false, std::memory_order_release);
    return step;
  }

  static std::int64_t steady_now() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The first call in a fork() child (see the top): forget the parent's requests and poller.
  [[gnu::noinline]] void forget_in_fork_child() noexcept {
    fork_guard_.forget_once([this]() noexcept {
      fifos_.forget_all();
      const auto forget = [](channel_type &channel) noexcept {
        (void)channel.take_all();  // the parent's requests: neither called nor freed
        channel.unplaced = nullptr;
        channel.in_progress = 0;
      };
      forget(*shared_channel_);
      signal_slots_.forget_all();
      for (channel_type *channel = channels_.load(std::memory_order_acquire); channel != nullptr;
           channel = channel->next_channel)
        forget(*channel);
      polling_.value.store(false, std::memory_order_relaxed);
      stopping_.store(false, std::memory_order_relaxed);
      doorbell_.value.reset();
      if (poller_ != nullptr) {
        poller_ = nullptr;  // names the parent's thread, which the child does not have: not joined
        try {
          poller_ = new std::thread([this] { run_poller(); });
        } catch (...) {
          poller_ = nullptr;  // the child's queue is then polled by poll() and its destructor only
        }
      }
    });
  }

  Backend backend_;
  const CompletionQueueOptions options_;
  const std::uint64_t id_ = detail::next_pool_id();
  detail::ForkGuard fork_guard_;

  // Read by every request (the doorbell), written when the poller sleeps or wakes: a line of its own.
  detail::CacheLinePadded<detail::PollerDoorbell> doorbell_;
  // The channels: requesters push new ones at the head; the poller unlinks those of exited threads.
  std::atomic<channel_type *> channels_{nullptr};
  channel_type *const shared_channel_ = new channel_type(channel_type::kQueue);

  // The poller's: one thread at a time holds `polling_`, which orders them.
  detail::CacheLinePadded<std::atomic<bool>> polling_{false};
  detail::StreamFifos<request_type, channel_type> fifos_;
  detail::SignalProbes probes_;
  std::atomic<std::uint64_t> completions_{0};
  std::atomic<std::uint64_t> queries_{0};
  std::atomic<std::uint64_t> signal_reads_{0};
  std::atomic<std::uint64_t> signalled_{0};
  std::atomic<std::uint64_t> passes_{0};
  std::atomic<std::uint64_t> sleeps_{0};
  std::atomic<std::uint64_t> callback_exceptions_{0};
  std::atomic<std::uint64_t> requests_{0};

  std::atomic<bool> stopping_{false};
  std::thread *poller_ = nullptr;
  // The blocks of completion-signal slots, one per thread with a channel (signal_slots.h).
  detail::SignalSlotPool signal_slots_;
};

}  // namespace detail

template <CompletionBackend Backend>
class BasicCompletionQueue {
  using core_type = detail::CompletionQueueCore<Backend>;

 public:
  using backend_type = Backend;
  using stream_type = typename Backend::stream_type;
  using status_type = typename Backend::status_type;
  using completion = BasicCompletion<Backend>;

  /// Starts the poller thread for kOwnThread. Throws std::invalid_argument for options out of
  /// range (naming the value), std::system_error if the thread cannot start, std::bad_alloc.
  explicit BasicCompletionQueue(Backend backend = Backend(), CompletionQueueOptions options = {})
      : core_(new core_type(std::move(backend), options)) {}

  BasicCompletionQueue(const BasicCompletionQueue &) = delete;
  BasicCompletionQueue &operator=(const BasicCompletionQueue &) = delete;

  /// Waits until every request made so far is done, running their callbacks (and those of the
  /// requests they make), then stops the poller. Not thread-safe: no other call on this queue
  /// may run concurrently, or begin after; handles may outlive the queue.
  /// Called from one of the queue's own callbacks (or a poll() under one), it cannot wait for the
  /// pass that runs it: it returns at once, and that pass finishes the destruction when it is
  /// over, as this would have (every request waited for, every callback run): on the poller
  /// thread, which then ends, or inside the poll() that ran the callback, which returns only
  /// then. The callbacks that run after it returned must not use the queue.
  ~BasicCompletionQueue() { core_->close(); }

  /// Asks for `callback(status)` to run once the work enqueued on `stream` so far is done; returns
  /// a handle on the request (dropping it is fine). `status` is what the work ended with: kSuccess,
  /// or an error (a sticky device error included), also one that kept the request from being
  /// recorded. The callback runs on the polling thread; it may call CUDA, and ask for more.
  /// Thread-safe; lock-free but for the allocation of the request (and, on a thread's first
  /// request, of its channel). Throws, keeping `callback` untouched and taking no event:
  /// - std::invalid_argument if `callback` converts to false (a null function pointer, an empty
  ///   std::function or std::move_only_function: there is nothing to call);
  /// - std::invalid_argument if the backend refuses `stream` (CUDA: it is capturing);
  /// - std::bad_alloc.
  template <class F>
  requires std::invocable < std::decay_t<F>
  &, const status_type & > completion notify(stream_type stream, F &&callback) {
    return core_->notify(stream, std::forward<F>(callback));
  }

  /// As above, without a callback: only the handle tells.
  completion notify(stream_type stream) { return core_->notify(stream); }

  /// One polling pass: takes new requests, queries the oldest of each stream, runs the callbacks
  /// of those done. Returns how many requests it finished. For kCaller queues; on a kOwnThread
  /// queue it polls alongside the poller thread. Thread-safe: one thread polls at a time, and a
  /// call that finds another polling returns 0 at once (so does a callback that calls it).
  /// Non-blocking but for the backend's queries and the callbacks, and for a pass whose callback
  /// destroyed the queue: the call then finishes the destruction (see the destructor), and counts
  /// what that finished too. Never throws.
  std::size_t poll() noexcept { return core_->poll(); }

  /// Thread-safe, wait-free; the counts are read with relaxed loads (see CompletionQueueStats).
  CompletionQueueStats stats() const noexcept { return core_->stats(); }

  /// CPU time the queue's poller thread has used; zero for kCaller. Thread-safe.
  std::chrono::nanoseconds poller_cpu_time() const noexcept { return core_->poller_cpu_time(); }

  const CompletionQueueOptions &options() const noexcept { return core_->options(); }
  Backend &backend() noexcept { return core_->backend(); }

 private:
  core_type *const core_;
};

}  // namespace evpool
