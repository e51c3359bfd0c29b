// evpool competitor: a waiter thread per stream, blocking in cudaEventSynchronize. Private;
// benchmarks only.
//
// Design rationale
// ----------------
// The mechanism people write first when they need a callback that may call CUDA: each requesting
// thread (here: each stream) gets a waiter thread of its own; a request records an event on the
// stream and hands it to the waiter, which synchronises on the events in the order they came and
// runs each callback after its event. No query is ever made, and completions of one stream never
// wait behind another's; the price is a thread per stream, and whatever cudaEventSynchronize
// costs while it waits. The events are created with cudaEventDisableTiming and nothing else, as
// the other mechanisms' are, so under the default device flags (cudaDeviceScheduleAuto, one
// context) the driver spins while it waits: a waiter with work in flight holds a core. That is
// the point of measuring it (poller_cpu_busy is the sum over the waiters, in cores).
//
// Choices, stated:
// - The hand-off is a std::mutex, a std::condition_variable and a std::deque per waiter: the
//   plain way to write it (a lock-free ring would shave the hand-off, not the synchronisation,
//   which dominates). The requester notifies after every push; the condition variable makes that
//   a no-op unless the waiter sleeps.
// - Events come from a free list per waiter, under the same mutex: the waiter puts an event back
//   once its callback has run, a requester takes one (or creates one when the list is empty).
// - Recording happens outside the lock, between taking the event and queueing it: the waiter
//   must not wait behind a CUDA call of the requester.
#pragma once

#include <cuda_runtime_api.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/detail/thread_cpu_time.h"

namespace evpool::competitors {

class EventSyncThreads {
 public:
  using callback_type = std::function<void(cudaError_t)>;

  /// Starts `waiters` waiter threads on the caller's current device. Throws std::system_error if
  /// a thread cannot start (those started are stopped).
  explicit EventSyncThreads(int waiters) : waiters_(static_cast<std::size_t>(waiters)) {
    int device = 0;
    (void)cudaGetDevice(&device);
    try {
      for (Waiter &waiter : waiters_) {
        waiter.thread = std::thread([&waiter, device] { run(waiter, device); });
        waiter.handle = waiter.thread.native_handle();
      }
    } catch (...) {
      stop();
      throw;
    }
  }
  EventSyncThreads(const EventSyncThreads &) = delete;
  EventSyncThreads &operator=(const EventSyncThreads &) = delete;

  /// Waits for every request handed over so far (running its callback), then stops the waiters
  /// and destroys their events.
  ~EventSyncThreads() { stop(); }

  /// Runs `callback(status)` on waiter `waiter`'s thread once the work enqueued on `stream` so far
  /// is done; at once, on the caller's thread, with the error if the event cannot be created or
  /// recorded. Thread-safe: any number of threads may ask one waiter (the example scheduler's
  /// workers share a waiter per stream); the waiter then synchronises in the order the requests
  /// were handed over, which may differ from their order on the stream, and each callback still
  /// follows its own work. Throws std::bad_alloc.
  void notify(int waiter, cudaStream_t stream, callback_type callback) {
    Waiter &own = waiters_[static_cast<std::size_t>(waiter)];
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(own.mutex);
      if (!own.free.empty()) {
        event = own.free.back();
        own.free.pop_back();
      }
    }
    if (event == nullptr) {
      if (const cudaError_t created = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
          created != cudaSuccess) {
        callback(created);
        return;
      }
      events_created_.fetch_add(1, std::memory_order_relaxed);
    }
    if (const cudaError_t recorded = cudaEventRecord(event, stream); recorded != cudaSuccess) {
      give_back(own, event);
      callback(recorded);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(own.mutex);
      own.pending.push_back({event, std::move(callback)});
    }
    own.wakeup.notify_one();
  }

  /// Events the waiters have created, for a benchmark's report. Thread-safe.
  std::uint64_t events_created() const noexcept { return events_created_.load(std::memory_order_relaxed); }

  /// CPU time all waiter threads have used together. Thread-safe.
  std::chrono::nanoseconds cpu_time() const noexcept {
    std::chrono::nanoseconds total{0};
    for (const Waiter &waiter : waiters_) total += detail::thread_cpu_time(waiter.handle);
    return total;
  }

 private:
  struct Pending {
    cudaEvent_t event;
    callback_type callback;
  };

  // Aligned so that the waiters' locks do not share cache lines.
  struct alignas(128) Waiter {
    std::mutex mutex;
    std::condition_variable wakeup;
    std::deque<Pending> pending;    // under `mutex`
    std::vector<cudaEvent_t> free;  // under `mutex`
    bool stopping = false;          // under `mutex`
    std::thread thread;
    pthread_t handle{};  // for cpu_time(), which is const: std::thread::native_handle() is not
  };

  static void run(Waiter &waiter, int device) {
    (void)cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(waiter.mutex);
    for (;;) {
      waiter.wakeup.wait(lock, [&] { return waiter.stopping || !waiter.pending.empty(); });
      if (waiter.pending.empty()) return;  // stopping, and nothing left to wait for
      Pending next = std::move(waiter.pending.front());
      waiter.pending.pop_front();
      lock.unlock();
      next.callback(cudaEventSynchronize(next.event));
      next.callback = nullptr;  // what it captured goes before the lock is taken again
      lock.lock();
      waiter.free.push_back(next.event);
    }
  }

  static void give_back(Waiter &waiter, cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(waiter.mutex);
    waiter.free.push_back(event);
  }

  void stop() noexcept {
    for (Waiter &waiter : waiters_) {
      if (!waiter.thread.joinable()) continue;
      {
        std::lock_guard<std::mutex> lock(waiter.mutex);
        waiter.stopping = true;
      }
      waiter.wakeup.notify_one();
      waiter.thread.join();
      for (cudaEvent_t event : waiter.free) (void)cudaEventDestroy(event);
      waiter.free.clear();
    }
  }

  std::vector<Waiter> waiters_;
  std::atomic<std::uint64_t> events_created_{0};  // a tally only: relaxed
};

}  // namespace evpool::competitors
