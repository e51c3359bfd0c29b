// evpool competitor: TensorFlow's EventMgr, one FIFO of recorded events under one mutex, swept by
// a polling thread that sleeps between sweeps. Private; benchmarks only.
//
// Design rationale
// ----------------
// TensorFlow hears of GPU work being done through EventMgr::ThenExecute(stream, func): one
// EventMgr per device. This re-implements, without its code, the EventMgr of
// tensorflow/core/common_runtime/gpu/gpu_event_mgr.{h,cc}, later moved unchanged in this respect
// to tensorflow/core/common_runtime/device/device_event_mgr.{h,cc}:
// - One mutex guards everything: a stack of free events (a vector, created one at a time when it
//   is empty, never destroyed until the EventMgr is) and a deque of events in use, each with its
//   callback, in the order they were asked for, whatever their stream.
// - ThenExecute, under the mutex: takes a free event, records it on the stream, appends it to
//   the deque, notifies the polling thread if the deque was empty; then polls once itself, on
//   the caller's thread ("PollEvents(false)"): it queries the deque's events from the front and
//   returns at the first that is still pending (so, returning early, it does not even reach the
//   clean-up of the front).
// - The polling thread ("PollLoop"), under the mutex: waits on a condition variable while the
//   deque is empty, then sweeps (the dedicated "PollEvents(true)"): it queries EVERY event of
//   the deque not yet seen complete, front to back; a complete one goes back to the free stack,
//   its record stays in place, marked done, and its callback is set aside; after the sweep the
//   records marked done at the front are popped, up to the first still pending. Outside the
//   mutex it hands the callbacks over; then, if events are still pending, it sleeps
//   polling_active_delay_usecs (TensorFlow's default, 10 us) before the next sweep.
// - The callbacks do not run on the polling thread: TensorFlow schedules each one ("FreeMemory",
//   "The function must be called in another thread") on the EventMgr's thread pool of two
//   threads, one of which the polling loop occupies for good: so one thread runs them.
// - An event that reports an error is fatal (LOG(FATAL)); here too (std::abort, with a message).
//
// What is not TensorFlow's, and why:
// - The mutex is std::mutex (TensorFlow's is absl::Mutex). The sleep is std::this_thread::
//   sleep_for, nanosleep underneath as in TensorFlow's PosixEnv::SleepForMicroseconds. Neither
//   sets the thread's timer slack, so in TensorFlow a 10 us sleep lasts about 60 us on Linux
//   (50 us of default slack). The polling thread here sets 1 us, as evpool's poller does: the
//   benchmarks compare the mechanisms, not the slack of their sleeps.
// - The callback thread is a std::deque under a mutex and a condition variable, whose thread
//   spins for kCallbackSpins pauses before it sleeps; TensorFlow's is an Eigen thread-pool worker,
//   which tries 5000 / 2 = 2500 times to find work before it sleeps. The pauses stand in for its
//   attempts; Eigen's queue from an outside thread also takes a mutex.
// - Events are created with cudaEventDisableTiming, as StreamExecutor creates them; queried and
//   recorded through the driver's cuEventQuery and cuEventRecord, as StreamExecutor does (looked
//   up through the runtime, so that nothing links libcuda; the runtime's calls if the lookup
//   fails). StreamExecutor also makes its context current around each call; here the polling
//   thread sets its device once.
// - Only callbacks: TensorFlow's older EventMgr also freed tensors and buffers the same way.
// - TensorFlow's latest device_event_mgr.cc keeps a deque per stream instead (a hash map keyed
//   by stream), stops at each stream's first pending event, and has ThenExecute poll only its own
//   stream: it queries only the oldest of each stream, as evpool does. This reproduces the single
//   FIFO that TensorFlow used from its first release until that change.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "evpool/detail/backoff.h"
#include "evpool/detail/thread_cpu_time.h"

namespace evpool::competitors {

class FifoEventPoller {
 public:
  using callback_type = std::function<void()>;
  /// Eigen's spin before a worker sleeps: 5000 attempts over the pool's two threads.
  static constexpr int kCallbackSpins = 2500;

  /// Starts the polling thread and the callback thread, on the caller's current device (an
  /// EventMgr serves one device). Throws std::system_error if a thread cannot start.
  explicit FifoEventPoller(std::chrono::microseconds active_delay = std::chrono::microseconds(10))
      : active_delay_(active_delay) {
    (void)cudaGetDevice(&device_);
    resolve("cuEventQuery", query_);
    resolve("cuEventRecord", record_);
    callback_thread_ = std::thread([this] { run_callbacks(); });
    try {
      poll_thread_ = std::thread([this] { poll_loop(); });
    } catch (...) {
      stop_callbacks();
      throw;
    }
    poll_handle_ = poll_thread_.native_handle();
    callback_handle_ = callback_thread_.native_handle();
  }
  FifoEventPoller(const FifoEventPoller &) = delete;
  FifoEventPoller &operator=(const FifoEventPoller &) = delete;

  /// Waits for every event in use (TensorFlow's destructor schedules the callbacks of those left
  /// without waiting; the benchmark drains first, so this never waits), runs the callbacks, stops
  /// both threads and destroys the events.
  ~FifoEventPoller() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    events_pending_.notify_all();
    poll_thread_.join();
    for (InUse &in_use : used_events_) {
      if (in_use.event == nullptr) continue;
      (void)cudaEventSynchronize(in_use.event);
      free_events_.push_back(in_use.event);
      schedule(std::move(in_use.callback));
    }
    used_events_.clear();
    stop_callbacks();
    for (cudaEvent_t event : free_events_) (void)cudaEventDestroy(event);
  }

  /// Runs `callback` on the callback thread once the work enqueued on `stream` so far is done.
  /// Thread-safe (one mutex). Aborts if the event cannot be created or recorded, as TensorFlow
  /// does. Throws std::bad_alloc.
  void ThenExecute(cudaStream_t stream, callback_type callback) {
    DoneCallbacks done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_events_.empty()) {
        cudaEvent_t created = nullptr;
        fatal_unless(cudaEventCreateWithFlags(&created, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        free_events_.push_back(created);
        events_created_.fetch_add(1, std::memory_order_relaxed);
      }
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      fatal_unless(record(event, stream), "cuEventRecord");
      const bool was_empty = used_events_.empty();
      used_events_.push_back({event, std::move(callback)});
      if (was_empty) events_pending_.notify_all();
      poll_events(/*dedicated=*/false, done);
    }
    for (callback_type &callback : done) schedule(std::move(callback));
  }

  /// Event queries so far, by the polling thread and by ThenExecute together. Thread-safe.
  std::uint64_t queries() const noexcept { return queries_.load(std::memory_order_relaxed); }

  /// Events the poller has created, for a benchmark's report. Thread-safe.
  std::uint64_t events_created() const noexcept { return events_created_.load(std::memory_order_relaxed); }

  /// CPU time of the polling thread and the callback thread together: both are the mechanism's
  /// (evpool runs its callbacks on its poller). Thread-safe.
  std::chrono::nanoseconds cpu_time() const noexcept {
    return detail::thread_cpu_time(poll_handle_) + detail::thread_cpu_time(callback_handle_);
  }

 private:
  // TensorFlow's ToFreeVector, inline for 4: a call that finds a few done allocates nothing.
  using DoneCallbacks = boost::container::small_vector<callback_type, 4>;

  struct InUse {
    cudaEvent_t event;  // null once seen complete, until popped from the front
    callback_type callback;
  };

  void poll_loop() {
    (void)cudaSetDevice(device_);
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // 1 us, as evpool's poller (see the top)
    DoneCallbacks done;
    for (;;) {
      bool still_pending = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (stopping_) break;
        // One wait, no predicate, as TensorFlow's: a spurious wake-up only sweeps an empty deque.
        if (used_events_.empty()) events_pending_.wait(lock);
        poll_events(/*dedicated=*/true, done);
        still_pending = !used_events_.empty();
      }
      for (callback_type &callback : done) schedule(std::move(callback));
      done.clear();
      if (still_pending) std::this_thread::sleep_for(active_delay_);
    }
  }

  // The caller holds `mutex_`. The dedicated poller sweeps every event; a requester returns at
  // the first pending one, before the front is cleaned up.
  void poll_events(bool dedicated, DoneCallbacks &done) {
    for (InUse &in_use : used_events_) {
      if (in_use.event == nullptr) continue;
      // Relaxed: one writer at a time (under the mutex); readers only want a recent count.
      queries_.store(queries_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      const CUresult status = query(in_use.event);
      if (status == CUDA_ERROR_NOT_READY) {
        if (!dedicated) return;
        continue;
      }
      fatal_unless(status, "cuEventQuery");
      done.push_back(std::move(in_use.callback));
      free_events_.push_back(in_use.event);
      in_use.event = nullptr;
    }
    while (!used_events_.empty() && used_events_.front().event == nullptr) used_events_.pop_front();
  }

  // TensorFlow's threadpool_.Schedule, for the one thread the polling loop leaves free.
  void schedule(callback_type callback) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(callback_mutex_);
      callbacks_.push_back(std::move(callback));
      // Relaxed: a hint for the spinning thread, which takes the lock before it trusts the queue.
      queued_callbacks_.fetch_add(1, std::memory_order_relaxed);
      wake = callback_thread_sleeps_;
    }
    if (wake) callback_wakeup_.notify_one();
  }

  void run_callbacks() {
    std::deque<callback_type> batch;
    for (;;) {
      for (int spin = 0; spin < kCallbackSpins && queued_callbacks_.load(std::memory_order_relaxed) == 0; ++spin)
        detail::cpu_relax();
      {
        std::unique_lock<std::mutex> lock(callback_mutex_);
        while (callbacks_.empty() && !callbacks_stopping_) {
          callback_thread_sleeps_ = true;
          callback_wakeup_.wait(lock);
          callback_thread_sleeps_ = false;
        }
        if (callbacks_.empty()) return;  // stopping, and none left
        batch.swap(callbacks_);
        queued_callbacks_.fetch_sub(batch.size(), std::memory_order_relaxed);
      }
      for (callback_type &callback : batch) callback();
      batch.clear();
    }
  }

  void stop_callbacks() noexcept {
    {
      std::lock_guard<std::mutex> lock(callback_mutex_);
      callbacks_stopping_ = true;
    }
    callback_wakeup_.notify_one();
    callback_thread_.join();
  }

  CUresult query(cudaEvent_t event) const noexcept {
    if (query_ != nullptr) return query_(reinterpret_cast<CUevent>(event));
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return CUDA_SUCCESS;
    if (status == cudaErrorNotReady) return CUDA_ERROR_NOT_READY;
    return CUDA_ERROR_UNKNOWN;
  }

  CUresult record(cudaEvent_t event, cudaStream_t stream) const noexcept {
    if (record_ != nullptr)
      return record_(reinterpret_cast<CUevent>(event), reinterpret_cast<CUstream>(stream));
    return cudaEventRecord(event, stream) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  }

  static void fatal_unless(CUresult status, const char *call) {
    if (status == CUDA_SUCCESS) return;
    std::fprintf(stderr, "FifoEventPoller: %s failed (CUresult %d)\n", call, static_cast<int>(status));
    std::abort();
  }
  static void fatal_unless(cudaError_t status, const char *call) {
    if (status == cudaSuccess) return;
    std::fprintf(stderr, "FifoEventPoller: %s: %s\n", call, cudaGetErrorString(status));
    std::abort();
  }

  template <class Function>
  static void resolve(const char *symbol, Function &function) {
    void *address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(symbol, &address, 2000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      function = reinterpret_cast<Function>(address);
  }

  const std::chrono::microseconds active_delay_;
  int device_ = 0;
  PFN_cuEventQuery_v2000 query_ = nullptr;
  PFN_cuEventRecord_v2000 record_ = nullptr;

  std::mutex mutex_;
  std::condition_variable events_pending_;
  std::vector<cudaEvent_t> free_events_;  // under `mutex_`
  std::deque<InUse> used_events_;         // under `mutex_`
  bool stopping_ = false;                 // under `mutex_`
  std::atomic<std::uint64_t> queries_{0};
  std::atomic<std::uint64_t> events_created_{0};  // a tally only: relaxed

  std::mutex callback_mutex_;
  std::condition_variable callback_wakeup_;
  std::deque<callback_type> callbacks_;  // under `callback_mutex_`
  bool callback_thread_sleeps_ = false;  // under `callback_mutex_`
  bool callbacks_stopping_ = false;      // under `callback_mutex_`
  std::atomic<std::size_t> queued_callbacks_{0};

  std::thread poll_thread_;
  std::thread callback_thread_;
  pthread_t poll_handle_{};
  pthread_t callback_handle_{};
};

}  // namespace evpool::competitors
