// evpool tests: a completion backend over host tokens, whose work completes when the test says.
//
// A HostWorkStream stands for a CUDA stream handle, and a HostWork for the stream it names: each
// record() enqueues one piece of work on it, numbered 1, 2, 3, ... in the order of the records;
// the test completes the work through any number (complete_through), in order, as a GPU would,
// and may make the work from some number on end with an error (fail_from): the stream's later
// work fails, its signals never land, and only its own events report the error. A device fault
// (fault_device) is CUDA's sticky error: every query of an event of the device, and every record
// on it, reports it, whatever the stream. A query answers from the token's work and number.
//
// A handle can be destroyed with its work still running and handed to the next stream created
// (recreate()), as CUDA does at once: from then on it names new work, with a new id (what
// record() reports as RecordedOn::stream_id), while the old work goes on until the test
// completes it through the HostWork that recreate() returned.
//
// The seam checks the queue's first promise: no request is finished before its own work is done.
// The queue runs a request's callback, then gives its event back, then marks it done, so an event
// given back while its work (through its number) is still running belongs to a request finished
// early. give_back() counts those (early_finishes(), first_early_finish()), and every completion
// test's fixture checks the count at its end (host_completion_fixture.h).
//
// Completion signals (CompletionSignalBackend): record() with a signal registers the word and value
// with the work it records, and the "GPU" writes the value, with a release store, when the test
// completes the work through its number, unless that work failed (fail_from): a write behind
// failed work never lands, as on a GPU after a fault. allocate_signal_words() hands out plain
// zeroed words (or nothing, after refuse_signal_words()); a device told cannot_signal() takes no
// signal write, as a device without 64-bit stream memory operations. The pending writes of a work
// are kept under a mutex that only record() and the completers take, never the poller: the
// poller meets the seam only through the word's release store, as it meets the device's write.
//
// Everything the backend keeps per token is a relaxed atomic indexed by the token's serial: the
// seam adds no ordering of its own between a requester's record() and the poller's query(), so
// that ThreadSanitizer sees exactly the ordering the queue provides (a mutex here would hide a
// missing release in the queue's channels).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/completion_backend.h"
#include "evpool/host_backend.h"

namespace evpool::test {

/// The work of one stream's life, numbered in the order it was enqueued.
class HostWork {
 public:
  HostWork() = default;
  HostWork(const HostWork &) = delete;
  HostWork &operator=(const HostWork &) = delete;

  /// Unique in the process, never reused (CUDA's cudaStreamGetId).
  std::uint64_t id() const noexcept { return id_; }

  /// The work through number `last` is done (never undone: a lower number changes nothing); the
  /// signals of the work done without error land. As on a GPU, where the write comes before the
  /// event, a signalled record's query says done only once its signal has landed (or, for
  /// failed work, been dropped): so no request is finished while its word may still be written.
  void complete_through(std::uint64_t last) noexcept {
    std::uint64_t seen = completed_.load(std::memory_order_relaxed);
    while (seen < last && !completed_.compare_exchange_weak(seen, last, std::memory_order_relaxed)) {
    }
    const std::lock_guard lock(signals_mutex_);
    land_signals();
  }
  /// Everything enqueued so far is done.
  void complete_all() noexcept { complete_through(enqueued()); }
  /// Work numbered `first` and later ends with `status` (a sticky error).
  void fail_from(std::uint64_t first, int status) noexcept {
    error_status_.store(status, std::memory_order_relaxed);
    error_from_.store(first, std::memory_order_relaxed);
  }

  std::uint64_t enqueued() const noexcept { return enqueued_.load(std::memory_order_relaxed); }
  std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_relaxed); }

 private:
  friend class HostCompletionBackend;

  struct PendingSignal {
    std::uint64_t number;
    std::uint64_t *word;
    std::uint64_t value;
    std::atomic<std::uint64_t> *pending;  // the record's mark, cleared once the write is made
    std::uint64_t registration;           // what the mark holds for this signal
  };

  // record(): the signal of work `number` lands once the work is done (at once if it is).
  void add_signal(const PendingSignal &signal) {
    const std::lock_guard lock(signals_mutex_);
    pending_signals_.push_back(signal);
    land_signals();
  }

  // Under signals_mutex_: writes the signals of the work done without error, forgets those of
  // failed work (they never land).
  void land_signals() noexcept {
    const std::uint64_t completed = completed_.load(std::memory_order_relaxed);
    const std::uint64_t error_from = error_from_.load(std::memory_order_relaxed);
    std::erase_if(pending_signals_, [&](const PendingSignal &signal) {
      if (signal.number > completed) return false;
      // Release: the "device's" fence before its write; the poller reads with acquire.
      if (signal.number < error_from)
        std::atomic_ref<std::uint64_t>(*signal.word).store(signal.value, std::memory_order_release);
      // After the write: the record's query may say done from now on. A compare-exchange: the
      // event (and its mark) may already serve a later record, whose mark must stay. Relaxed, as
      // every mark of the seam (see the top).
      std::uint64_t expected = signal.registration;
      signal.pending->compare_exchange_strong(expected, 0, std::memory_order_relaxed);
      return true;
    });
  }

  static inline std::atomic<std::uint64_t> next_id{1};

  // Relaxed: the id only has to be unique.
  const std::uint64_t id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  std::atomic<std::uint64_t> enqueued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> error_from_{UINT64_MAX};
  std::atomic<int> error_status_{0};
  std::mutex signals_mutex_;
  std::vector<PendingSignal> pending_signals_;
};

/// A stream handle: names one HostWork at a time. The work calls act on the one it names now.
/// It must outlive every queue that holds requests on it (declare it before the queue): a queue's
/// poller reads it until the queue is destroyed.
class HostWorkStream {
 public:
  explicit HostWorkStream(int device = 0) : device_(device) {
    lifetimes_.push_back(std::make_unique<HostWork>());
    // Relaxed: whatever hands the handle to other threads publishes its construction.
    current_.store(lifetimes_.back().get(), std::memory_order_relaxed);
  }
  HostWorkStream(const HostWorkStream &) = delete;
  HostWorkStream &operator=(const HostWorkStream &) = delete;

  int device() const noexcept { return device_; }

  /// The work of the stream the handle names now.
  HostWork &work() const noexcept {
    // Acquire: pairs with recreate()'s release, so the new work is seen constructed.
    return *current_.load(std::memory_order_acquire);
  }
  void complete_through(std::uint64_t last) noexcept { work().complete_through(last); }
  void complete_all() noexcept { work().complete_all(); }
  void fail_from(std::uint64_t first, int status) noexcept { work().fail_from(first, status); }
  std::uint64_t enqueued() const noexcept { return work().enqueued(); }
  std::uint64_t completed() const noexcept { return work().completed(); }

  /// The stream is destroyed with its work still running, and a new stream gets its handle:
  /// returns the old stream's work, which goes on until the test completes it. Called by one
  /// thread at a time; the old work lives as long as the handle.
  HostWork &recreate() {
    HostWork &old = work();
    lifetimes_.push_back(std::make_unique<HostWork>());
    // Release: publishes the new work's construction to the threads that record on the handle.
    current_.store(lifetimes_.back().get(), std::memory_order_release);
    return old;
  }

  /// record() on this stream fails with `status` (0: stops failing).
  void fail_records(int status) noexcept { record_error_.store(status, std::memory_order_relaxed); }
  void set_capturing(bool capturing) noexcept { capturing_.store(capturing, std::memory_order_relaxed); }
  /// record() reports no stream id for this handle, as where cudaStreamGetId fails.
  void hide_stream_id(bool hidden) noexcept { id_hidden_.store(hidden, std::memory_order_relaxed); }

 private:
  friend class HostCompletionBackend;

  const int device_;
  std::vector<std::unique_ptr<HostWork>> lifetimes_;  // every stream the handle named: records point at them
  std::atomic<HostWork *> current_{nullptr};
  std::atomic<int> record_error_{0};
  std::atomic<bool> capturing_{false};
  std::atomic<bool> id_hidden_{false};
};

class HostCompletionBackend {
 public:
  using stream_type = HostWorkStream *;
  using status_type = int;
  using event_type = HostBackend::Event;
  using pool_type = BasicHandlePool<HostBackend>;
  static constexpr int kSuccess = 0;
  /// The status of a request whose event could not be created (the pool's Get threw).
  static constexpr int kCreateFailed = -1;
  static constexpr std::uint64_t kTrackedSerials = std::uint64_t{1} << 20;

  explicit HostCompletionBackend(pool_type &pool) : pool_(&pool), state_(std::make_shared<State>()) {}

  void check_stream(HostWorkStream *stream) const {
    if (stream->capturing_.load(std::memory_order_relaxed))
      throw std::invalid_argument("host stream is capturing");
  }

  int record(HostWorkStream *stream, event_type &event, RecordedOn &on) noexcept {
    return record(stream, event, on, SignalSlot{});
  }

  int record(HostWorkStream *stream, event_type &event, RecordedOn &on, const SignalSlot &signal) noexcept {
    HostWork &work = stream->work();  // read once: the record and the id name the same stream
    on.device = stream->device();
    if (!stream->id_hidden_.load(std::memory_order_relaxed)) on.stream_id = work.id();
    try {
      event = pool_->Get(on.device);
    } catch (...) {
      return kCreateFailed;
    }
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    if (serial >= kTrackedSerials) std::abort();  // a test that makes a million events needs a bigger table
    // Relaxed, all (see the top). The number is taken after the stream is chosen: records on one
    // stream from several threads are numbered in the order they happen. A failed record has no
    // number (0): no work to wait for.
    State::Record &slot = state_->records[serial];
    slot.work.store(&work, std::memory_order_relaxed);
    slot.device.store(on.device, std::memory_order_relaxed);
    // A previous record of this event may still be marked (its write made, the mark not yet
    // cleared): this record is not that one's.
    slot.pending_signal.store(0, std::memory_order_relaxed);
    const int fault = fault_of(on.device);
    if (const int error = fault != 0 ? fault : stream->record_error_.load(std::memory_order_relaxed); error != 0) {
      slot.number.store(0, std::memory_order_relaxed);
      return error;
    }
    const std::uint64_t number = work.enqueued_.fetch_add(1, std::memory_order_relaxed) + 1;
    slot.number.store(number, std::memory_order_relaxed);
    if (signal.word != nullptr && can_signal(on.device)) {
      // Relaxed: a unique number, and the mark that the query reads (see complete_through).
      const std::uint64_t registration = state_->registrations.fetch_add(1, std::memory_order_relaxed) + 1;
      slot.pending_signal.store(registration, std::memory_order_relaxed);
      try {
        work.add_signal({number, signal.word, signal.value, &slot.pending_signal, registration});
        on.signalled = true;
      } catch (...) {
        slot.pending_signal.store(0, std::memory_order_relaxed);  // no memory: heard through the event
      }
    }
    return kSuccess;
  }

  std::uint64_t *allocate_signal_words(std::size_t count) noexcept {
    if (state_->refuse_words.load(std::memory_order_relaxed)) return nullptr;
    auto *words = new (std::nothrow) std::uint64_t[count]();
    if (words != nullptr) state_->signal_words.fetch_add(count, std::memory_order_relaxed);
    return words;
  }

  void free_signal_words(std::uint64_t *words, std::size_t count) noexcept {
    state_->signal_words.fetch_sub(count, std::memory_order_relaxed);
    delete[] words;
  }

  /// allocate_signal_words() returns nullptr from now on (a driver without cuStreamWriteValue64).
  void refuse_signal_words() noexcept { state_->refuse_words.store(true, std::memory_order_relaxed); }
  /// Records on `device` (0 to 31) take no signal write (no 64-bit stream memory operations).
  void cannot_signal(int device) noexcept {
    state_->unsignalling_devices.fetch_or(std::uint32_t{1} << device, std::memory_order_relaxed);
  }
  /// `device` (0 to 31) faults, as after an illegal address: from now on every query of an event
  /// of the device, whatever its stream and its work, and every record on it, reports `status`.
  /// The test leaves the device's work pending: a faulted device runs nothing more, so no signal
  /// of it lands.
  void fault_device(int device, int status) noexcept {
    state_->device_faults[device].store(status, std::memory_order_relaxed);
  }
  /// Signal words allocated and not freed.
  std::uint64_t signal_words() const noexcept { return state_->signal_words.load(std::memory_order_relaxed); }

  std::optional<int> query(const event_type &event) noexcept {
    if (state_->query_hook) state_->query_hook();
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    State::Record &slot = state_->records[serial];
    slot.queries.fetch_add(1, std::memory_order_relaxed);
    state_->queries.fetch_add(1, std::memory_order_relaxed);
    if (const int fault = fault_of(slot.device.load(std::memory_order_relaxed)); fault != 0) return fault;
    const HostWork &work = *slot.work.load(std::memory_order_relaxed);
    const std::uint64_t number = slot.number.load(std::memory_order_relaxed);
    if (work.completed_.load(std::memory_order_relaxed) < number) return std::nullopt;
    if (slot.pending_signal.load(std::memory_order_relaxed) != 0)
      return std::nullopt;  // the write comes first
    return number >= work.error_from_.load(std::memory_order_relaxed)
               ? work.error_status_.load(std::memory_order_relaxed)
               : kSuccess;
  }

  void give_back(event_type &&event, int device) noexcept {
    if (!event) return;
    if (state_->give_back_hook) state_->give_back_hook();
    check_work_done(HostBackend::serial_of(event.get()));
    state_->given_back.fetch_add(1, std::memory_order_relaxed);
    try {
      pool_->Put(std::move(event), device);
    } catch (...) {
      const event_type refused(std::move(event));
    }
  }

  /// Runs `hook` on the polling thread at the start of every query, from now on. Set it before
  /// any request is made.
  void on_query(std::function<void()> hook) { state_->query_hook = std::move(hook); }
  /// Runs `hook` on the polling thread at the start of every give_back of an event, from now on.
  /// Set it before any request is made.
  void on_give_back(std::function<void()> hook) { state_->give_back_hook = std::move(hook); }

  /// Events given back while their work was still running: requests finished early (see the top).
  std::uint64_t early_finishes() const noexcept { return state_->early.load(std::memory_order_relaxed); }
  /// The first of them, described; empty if there was none. Read once the queue is gone.
  std::string first_early_finish() const {
    if (early_finishes() == 0) return {};
    return "the request recorded as number " + std::to_string(state_->early_number) + " on stream id " +
           std::to_string(state_->early_work) +
           " was finished (its event given back) when that stream's work was done through " +
           std::to_string(state_->early_completed) + " only";
  }

  /// Queries of the token with this serial, so far.
  std::uint64_t queries_of(std::uint64_t serial) const noexcept {
    return state_->records[serial].queries.load(std::memory_order_relaxed);
  }
  std::uint64_t queries() const noexcept { return state_->queries.load(std::memory_order_relaxed); }
  /// Events returned to the pool so far.
  std::uint64_t given_back() const noexcept { return state_->given_back.load(std::memory_order_relaxed); }
  pool_type &pool() const noexcept { return *pool_; }

 private:
  int fault_of(int device) const noexcept {
    return device < 0 || device >= 32 ? 0 : state_->device_faults[device].load(std::memory_order_relaxed);
  }

  bool can_signal(int device) const noexcept {
    return device < 0 || device >= 32 ||
           (state_->unsignalling_devices.load(std::memory_order_relaxed) & (std::uint32_t{1} << device)) == 0;
  }

  struct State {
    struct Record {
      std::atomic<HostWork *> work{nullptr};
      std::atomic<int> device{-1};
      std::atomic<std::uint64_t> number{0};
      std::atomic<std::uint64_t> queries{0};
      std::atomic<std::uint64_t> pending_signal{0};  // a registration whose write is not made yet
    };
    std::unique_ptr<Record[]> records{new Record[kTrackedSerials]};
    std::atomic<std::uint64_t> queries{0};
    std::atomic<std::uint64_t> given_back{0};
    std::atomic<bool> refuse_words{false};
    std::atomic<std::uint32_t> unsignalling_devices{0};
    std::atomic<int> device_faults[32] = {};
    std::atomic<std::uint64_t> signal_words{0};
    std::atomic<std::uint64_t> registrations{0};
    std::function<void()> query_hook;
    std::function<void()> give_back_hook;
    std::atomic<std::uint64_t> early{0};
    // The first early finish: written by the give_back that counted it first, read once the
    // queue is gone (its poller joined).
    std::uint64_t early_number = 0, early_work = 0, early_completed = 0;
  };

  // A record with a number whose work is not done through it: finished early (see the top). Work
  // never comes undone, so a request whose work is not done here was not done either when its
  // callback ran, just before. (Work that a concurrent completer finishes between the two hides
  // an early callback from this check; where the test completes the work itself, nothing can.)
  void check_work_done(std::uint64_t serial) noexcept {
    const State::Record &slot = state_->records[serial];
    const std::uint64_t number = slot.number.load(std::memory_order_relaxed);
    const HostWork &work = *slot.work.load(std::memory_order_relaxed);
    const std::uint64_t completed = work.completed();
    // A faulted device's work is over: it never completes, and its requests are rightly finished.
    if (number == 0 || completed >= number || fault_of(slot.device.load(std::memory_order_relaxed)) != 0)
      return;
    // Relaxed: a count; the first one's details are read after the poller is joined.
    if (state_->early.fetch_add(1, std::memory_order_relaxed) != 0) return;
    state_->early_number = number;
    state_->early_work = work.id();
    state_->early_completed = completed;
  }

  pool_type *pool_;
  std::shared_ptr<State> state_;
};

static_assert(CompletionSignalBackend<HostCompletionBackend>);

}  // namespace evpool::test
