// evpool tests: a completion backend over host tokens, whose work completes when the test says.
//
// A HostWorkStream stands for a CUDA stream: each record() enqueues one piece of work on it,
// numbered 1, 2, 3, ... in the order of the records; the test completes the work through any
// number (complete_through), in order, as a GPU would, and may make the work from some number on
// end with an error (fail_from), as a sticky error ends all later work. A query answers from the
// token's stream and number.
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
#include <optional>
#include <stdexcept>
#include <string>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool::test {

class HostWorkStream {
 public:
  explicit HostWorkStream(int device = 0) noexcept : device_(device) {}

  int device() const noexcept { return device_; }

  /// The work through number `last` is done (never undone: a lower number changes nothing).
  void complete_through(std::uint64_t last) noexcept {
    std::uint64_t seen = completed_.load(std::memory_order_relaxed);
    while (seen < last && !completed_.compare_exchange_weak(seen, last, std::memory_order_relaxed)) {
    }
  }
  /// Everything recorded so far is done.
  void complete_all() noexcept { complete_through(enqueued()); }
  /// Work numbered `first` and later ends with `status` (a sticky error).
  void fail_from(std::uint64_t first, int status) noexcept {
    error_status_.store(status, std::memory_order_relaxed);
    error_from_.store(first, std::memory_order_relaxed);
  }
  /// record() on this stream fails with `status` (0: stops failing).
  void fail_records(int status) noexcept { record_error_.store(status, std::memory_order_relaxed); }
  void set_capturing(bool capturing) noexcept { capturing_.store(capturing, std::memory_order_relaxed); }

  std::uint64_t enqueued() const noexcept { return enqueued_.load(std::memory_order_relaxed); }
  std::uint64_t completed() const noexcept { return completed_.load(std::memory_order_relaxed); }

 private:
  friend class HostCompletionBackend;

  const int device_;
  std::atomic<std::uint64_t> enqueued_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::uint64_t> error_from_{UINT64_MAX};
  std::atomic<int> error_status_{0};
  std::atomic<int> record_error_{0};
  std::atomic<bool> capturing_{false};
};

class HostCompletionBackend {
 public:
  using stream_type = HostWorkStream *;
  using status_type = int;
  using event_type = HostBackend::Event;
  using pool_type = BasicEventPool<HostBackend>;
  static constexpr int kSuccess = 0;
  /// The status of a request whose event could not be created (the pool's Get threw).
  static constexpr int kCreateFailed = -1;
  static constexpr std::uint64_t kTrackedSerials = std::uint64_t{1} << 20;

  explicit HostCompletionBackend(pool_type &pool) : pool_(&pool), state_(std::make_shared<State>()) {}

  void check_stream(HostWorkStream *stream) const {
    if (stream->capturing_.load(std::memory_order_relaxed))
      throw std::invalid_argument("host stream is capturing");
  }

  int record(HostWorkStream *stream, event_type &event, int &device) noexcept {
    device = stream->device();
    try {
      event = pool_->Get(device);
    } catch (...) {
      return kCreateFailed;
    }
    if (const int error = stream->record_error_.load(std::memory_order_relaxed); error != 0) return error;
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    if (serial >= kTrackedSerials) std::abort();  // a test that makes a million events needs a bigger table
    // Relaxed, all (see the top). The number is taken after the stream is chosen: records on one
    // stream from several threads are numbered in the order they happen.
    State::Record &slot = state_->records[serial];
    slot.stream.store(stream, std::memory_order_relaxed);
    slot.number.store(stream->enqueued_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return kSuccess;
  }

  std::optional<int> query(const event_type &event) noexcept {
    if (state_->query_hook) state_->query_hook();
    const std::uint64_t serial = HostBackend::serial_of(event.get());
    State::Record &slot = state_->records[serial];
    slot.queries.fetch_add(1, std::memory_order_relaxed);
    state_->queries.fetch_add(1, std::memory_order_relaxed);
    HostWorkStream *stream = slot.stream.load(std::memory_order_relaxed);
    const std::uint64_t number = slot.number.load(std::memory_order_relaxed);
    if (stream->completed_.load(std::memory_order_relaxed) < number) return std::nullopt;
    return number >= stream->error_from_.load(std::memory_order_relaxed)
               ? stream->error_status_.load(std::memory_order_relaxed)
               : kSuccess;
  }

  void give_back(event_type &&event, int device) noexcept {
    if (!event) return;
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

  /// Queries of the token with this serial, so far.
  std::uint64_t queries_of(std::uint64_t serial) const noexcept {
    return state_->records[serial].queries.load(std::memory_order_relaxed);
  }
  std::uint64_t queries() const noexcept { return state_->queries.load(std::memory_order_relaxed); }
  /// Events returned to the pool so far.
  std::uint64_t given_back() const noexcept { return state_->given_back.load(std::memory_order_relaxed); }
  pool_type &pool() const noexcept { return *pool_; }

 private:
  struct State {
    struct Record {
      std::atomic<HostWorkStream *> stream{nullptr};
      std::atomic<std::uint64_t> number{0};
      std::atomic<std::uint64_t> queries{0};
    };
    std::unique_ptr<Record[]> records{new Record[kTrackedSerials]};
    std::atomic<std::uint64_t> queries{0};
    std::atomic<std::uint64_t> given_back{0};
    std::function<void()> query_hook;
  };

  pool_type *pool_;
  std::shared_ptr<State> state_;
};

}  // namespace evpool::test
