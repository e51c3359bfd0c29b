// evpool competitor: pika's CUDA event polling, a poller that queries every pending event on
// every pass. Private; benchmarks only.
//
// Design rationale
// ----------------
// pika (the HPX fork, pika-org/pika) hears of CUDA work being done through
// add_event_callback(f, stream), answered by a poll() that its scheduler's worker threads call
// from their scheduling loop. This re-implements, without its code, what
// libs/pika/async_cuda/src/cuda_event_callback.cpp and its event pool
// (include/pika/async_cuda/cuda_event.hpp, cuda_event_pool) do:
// - Events come from a process-wide boost::lockfree::stack of cudaEvent_t, filled with 128
//   cudaEventDisableTiming events up front and grown one event at a time when it runs dry.
// - add_event_callback takes an event from the pool, records it on the stream (cudaEventRecord)
//   and enqueues {event, callback} on a lock-free multi-producer queue.
// - poll() takes a spinlock with try_lock (a second poller returns at once), then, in this order:
//   queries EVERY event of its vector of pending requests (std::remove_if), running the callback
//   of each that is no longer cudaErrorNotReady, with that status, and pushing its event back to
//   the pool; then drains the queue, querying each new request once: done, its callback runs and
//   its event goes back; not done, it joins the vector. Callbacks run inside the pass, on the
//   polling thread, under the spinlock. Queries go through the runtime (cudaEventQuery).
// - The scheduler calls poll() in its loop whether or not anything is pending: a worker that
//   polls never sleeps. Here a dedicated thread calls poll() in a loop (a pause between passes,
//   standing in for the rest of a scheduling loop), so it spins when idle, as pika's does.
//
// What is not pika's, and why:
// - The queue: pika's is moodycamel::ConcurrentQueue, which finds each producing thread's own
//   sub-queue by its thread id and whose consumer visits the producers in turn. Not available
//   here, so the same shape is built small: a lock-free stack per producing thread (a slot given
//   on the thread's first request, kMaxProducers of them, shared round-robin beyond that), which
//   the poller empties with one exchange and reverses to arrival order. Unlike moodycamel, which
//   stores elements in blocks, each request allocates a node (evpool's queue allocates its
//   request too).
// - The spinlock is an atomic flag (pika's pika::concurrency::spinlock); with one polling
//   thread it is never contended, and is kept because pika pays for it on every pass.
// - A failed cudaEventRecord throws in pika; here the callback is called at once with the error.
// - The pool belongs to the poller, not the process.
#pragma once

#include <cuda_runtime_api.h>
#include <pthread.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include <boost/lockfree/stack.hpp>

#include "evpool/detail/backoff.h"
#include "evpool/detail/cache_line_padded.h"
#include "evpool/detail/thread_cpu_time.h"

namespace evpool::competitors {

class PollAllEvents {
 public:
  using callback_type = std::function<void(cudaError_t)>;
  /// pika's cuda_event_pool::initial_events_in_pool.
  static constexpr int kInitialEvents = 128;
  static constexpr std::size_t kMaxProducers = 256;

  /// Fills the event pool on the caller's current device and starts the polling thread. Throws
  /// std::system_error if the thread cannot start.
  PollAllEvents() : events_(kInitialEvents) {
    (void)cudaGetDevice(&device_);
    for (int i = 0; i < kInitialEvents; ++i) (void)add_event_to_pool();
    poller_ = std::thread([this] { run(); });
    poller_handle_ = poller_.native_handle();
  }
  PollAllEvents(const PollAllEvents &) = delete;
  PollAllEvents &operator=(const PollAllEvents &) = delete;

  /// Polls until every request made so far is done (running its callback), then stops the
  /// polling thread and destroys the events. No request may be made during or after it.
  ~PollAllEvents() {
    // Release: the polling thread, seeing it, sees every request made before.
    stopping_.store(true, std::memory_order_release);
    poller_.join();
    cudaEvent_t event = nullptr;
    while (events_.pop(event)) (void)cudaEventDestroy(event);
  }

  /// Runs `callback(status)` on the polling thread once the work enqueued on `stream` so far is
  /// done; at once, on the caller's thread, with the error if the event cannot be created or
  /// recorded. Thread-safe, lock-free but for the allocation of the request. Throws
  /// std::bad_alloc.
  void add_event_callback(callback_type callback, cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    while (!events_.pop(event)) {
      if (const cudaError_t created = add_event_to_pool(); created != cudaSuccess) {
        callback(created);
        return;
      }
    }
    if (const cudaError_t recorded = cudaEventRecord(event, stream); recorded != cudaSuccess) {
      (void)events_.push(event);
      callback(recorded);
      return;
    }
    auto *request = new Request{{event, std::move(callback)}, nullptr};
    std::atomic<Request *> &head = intake_[producer_slot()].value;
    request->next = head.load(std::memory_order_relaxed);
    // Release: the poller, taking the list, sees the request's fields.
    while (!head.compare_exchange_weak(request->next, request, std::memory_order_release,
                                       std::memory_order_relaxed)) {
    }
  }

  /// Event queries the poller has made. Thread-safe.
  std::uint64_t queries() const noexcept { return queries_.load(std::memory_order_relaxed); }

  /// CPU time the polling thread has used. Thread-safe.
  std::chrono::nanoseconds cpu_time() const noexcept { return detail::thread_cpu_time(poller_handle_); }

 private:
  struct Pending {
    cudaEvent_t event;
    callback_type callback;
  };
  struct Request : Pending {
    Request *next;
  };

  void run() {
    (void)cudaSetDevice(device_);
    for (;;) {
      // Read before the pass: a pass that began after the stop was seen has taken every request.
      const bool stopping = stopping_.load(std::memory_order_acquire);
      poll();
      if (stopping && pending_.empty()) return;
      detail::cpu_relax();
    }
  }

  // One pass, pika's poll(): the pending vector first, every event of it, then the new requests.
  void poll() {
    // Acquire/release: as a spinlock; one polling thread here, so it never fails.
    if (polling_.value.exchange(true, std::memory_order_acquire)) return;
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](Pending &request) {
                                    const cudaError_t status = query(request.event);
                                    if (status == cudaErrorNotReady) return false;
                                    finish(request, status);
                                    return true;
                                  }),
                   pending_.end());
    // Acquire: pairs with the registration, so that every slot in use is visited.
    const std::size_t producers = std::min(next_slot_.load(std::memory_order_acquire), kMaxProducers);
    for (std::size_t slot = 0; slot < producers; ++slot) {
      std::atomic<Request *> &head = intake_[slot].value;
      if (head.load(std::memory_order_relaxed) == nullptr) continue;
      // Acquire: pairs with the requesters' release.
      Request *taken = head.exchange(nullptr, std::memory_order_acquire);
      Request *in_order = nullptr;
      while (taken != nullptr) {
        Request *next = taken->next;
        taken->next = in_order;
        in_order = taken;
        taken = next;
      }
      while (in_order != nullptr) {
        Request *request = in_order;
        in_order = request->next;
        const cudaError_t status = query(request->event);
        if (status == cudaErrorNotReady)
          pending_.push_back(std::move(static_cast<Pending &>(*request)));
        else
          finish(*request, status);
        delete request;
      }
    }
    polling_.value.store(false, std::memory_order_release);
  }

  cudaError_t query(cudaEvent_t event) noexcept {
    // Relaxed: one writer, the polling thread; readers only want a recent count.
    queries_.store(queries_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return cudaEventQuery(event);
  }

  void finish(Pending &request, cudaError_t status) {
    request.callback(status);
    (void)events_.push(request.event);
  }

  cudaError_t add_event_to_pool() {
    cudaEvent_t event = nullptr;
    const cudaError_t created = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (created == cudaSuccess) (void)events_.push(event);
    return created;
  }

  // A requesting thread's slot in this poller, given on its first request (moodycamel's implicit
  // producer, found by thread id).
  std::size_t producer_slot() {
    thread_local std::uint64_t owner = 0;
    thread_local std::size_t slot = 0;
    if (owner != id_) {
      owner = id_;
      // Release: pairs with the poller's acquire of the count.
      slot = next_slot_.fetch_add(1, std::memory_order_release) % kMaxProducers;
    }
    return slot;
  }

  static std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  // Not the poller's address: a later poller may be built at the same one.
  const std::uint64_t id_ = next_id();
  int device_ = 0;
  boost::lockfree::stack<cudaEvent_t, boost::lockfree::fixed_sized<false>> events_;
  std::array<detail::CacheLinePadded<std::atomic<Request *>>, kMaxProducers> intake_{};
  std::atomic<std::size_t> next_slot_{0};

  // The polling thread's.
  detail::CacheLinePadded<std::atomic<bool>> polling_{false};
  std::vector<Pending> pending_;
  std::atomic<std::uint64_t> queries_{0};

  std::atomic<bool> stopping_{false};
  std::thread poller_;
  pthread_t poller_handle_{};
};

}  // namespace evpool::competitors
