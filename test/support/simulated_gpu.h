// evpool tests: SimulatedGpu, streams, events and kernels on the host with CUDA's ordering rules,
// so that the example scheduler (examples/scheduler/executor.h) runs where no GPU exists.
//
// A stream is a FIFO of operations that one device thread runs in order: kernels (the test's
// function, called with the task's id), records of an event, waits on an event, and completion
// marks. As in CUDA, a wait waits for the record of the event that was enqueued last before the
// wait was (cudaStreamWaitEvent takes the event's state when it is called), and a wait on an event
// never recorded waits for nothing. The device thread runs streams side by side, round after
// round, and at different speeds, as work of different lengths would: the n-th stream seen runs
// one operation every (1 + n % 3) rounds, so that work enqueued without the waits it needs does
// overtake its inputs. A stream held up by a wait holds up no other. It cannot deadlock: the
// operation enqueued first among those pending is always at the head of its stream, and if it is
// a wait, the record it waits for was enqueued before it, so it has run.
//
// A kernel may fail: the test's function returns a nonzero status, and from then on the
// completion requests of that stream report it, as a CUDA stream's do after a fault; and
// synchronize() returns the first such status, as cudaDeviceSynchronize would.
//
// Streams and events are named by tokens, any std::uint64_t, such as the pools under test hand out
// (streams and events are separate name spaces): a stream token seen for the first time is a new
// stream, and a stream handed out again keeps its queued work, as a CUDA stream does.
//
// Completion marks are the link to the completion queue's host seam (host_completion_backend.h):
// mark(stream) enqueues a mark and returns the stream's HostWorkStream, on which the queue then
// records; when the device runs a stream's n-th mark, it completes that stream's HostWork through
// number n. So a request is complete exactly when the work enqueued before it has run. The marks
// and the queue's records of one stream are numbered alike only if one thread at a time enqueues
// on the stream (the stacks that use marks lease their streams exclusively), and only if each of
// the queue's records numbers one (the tests inject no fault into the events it takes).
//
// One mutex guards everything: this is the tests' model of a device, not the code under test. What
// the executor's own ordering gets right or wrong shows in what the kernels see.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "support/host_completion_backend.h"

namespace evpool::test {

class SimulatedGpu {
 public:
  using Token = std::uint64_t;

  /// Starts the device thread; `kernel(task)` runs on it for each launch, in device order, under
  /// the device's lock (it must not call the device), and returns the kernel's status (0: done).
  explicit SimulatedGpu(std::function<int(std::uint32_t task)> kernel) : kernel_(std::move(kernel)) {
    device_ = std::thread([this] { run(); });
  }
  SimulatedGpu(const SimulatedGpu &) = delete;
  SimulatedGpu &operator=(const SimulatedGpu &) = delete;

  /// Runs everything enqueued, then stops the device thread.
  ~SimulatedGpu() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_.notify_one();
    device_.join();
  }

  void launch(Token stream, std::uint32_t task) { enqueue(stream, Op{Op::kKernel, task, nullptr, 0}); }

  /// From now on, waits on `event` wait for this record.
  void record(Token event, Token stream) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Stream &own = stream_locked(stream);
    push_locked(own, Op{Op::kRecord, 0, nullptr, 0});
    events_[event] = Op{Op::kWait, 0, &own, own.enqueued};
  }

  void wait(Token stream, Token event) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Stream &own = stream_locked(stream);
    if (const auto recorded = events_.find(event); recorded != events_.end())
      push_locked(own, recorded->second);
  }

  /// Enqueues a completion mark; returns the handle the completion queue records on (see the top).
  HostWorkStream &mark(Token stream) {
    const std::lock_guard<std::mutex> lock(mutex_);
    Stream &own = stream_locked(stream);
    push_locked(own, Op{Op::kMark, 0, nullptr, 0});
    return own.work;
  }

  /// Waits until every operation enqueued so far has run, and returns the first status a kernel
  /// failed with, or 0 (cudaDeviceSynchronize).
  int synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
    return first_failure_;
  }

  /// Streams seen so far.
  std::size_t streams() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return streams_.size();
  }
  /// Operations enqueued and not yet run.
  std::size_t pending() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return pending_;
  }

 private:
  struct Stream;
  struct Op {
    enum Kind { kKernel, kRecord, kWait, kMark } kind;
    std::uint32_t task;  // kKernel
    Stream *after;       // kWait: the stream of the record waited for
    std::uint64_t at;    // kWait: that record's position in its stream (1, 2, ...)
  };
  struct Stream {
    explicit Stream(unsigned speed) : speed(speed) {}
    const unsigned speed;  // runs on rounds that are a multiple of it
    std::deque<Op> ops;
    std::uint64_t enqueued = 0;  // operations ever enqueued: the last one's position
    std::uint64_t ran = 0;       // operations run: all through this position
    std::uint64_t marks = 0;     // marks run
    bool failed = false;         // a kernel failed: every later mark reports it
    HostWorkStream work;
  };

  Stream &stream_locked(Token token) {
    std::unique_ptr<Stream> &stream = streams_[token];
    if (!stream) stream = std::make_unique<Stream>(1 + static_cast<unsigned>(streams_.size() % 3));
    return *stream;
  }

  void push_locked(Stream &stream, Op op) {
    stream.ops.push_back(op);
    ++stream.enqueued;
    ++pending_;
    work_.notify_one();
  }

  void enqueue(Token stream, Op op) {
    const std::lock_guard<std::mutex> lock(mutex_);
    push_locked(stream_locked(stream), op);
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::uint64_t round = 0;; ++round) {
      bool ran = false, later = false;
      for (auto &[token, stream] : streams_) {
        if (stream->ops.empty()) continue;
        const Op op = stream->ops.front();
        if (op.kind == Op::kWait && op.after->ran < op.at) continue;
        if (round % stream->speed != 0) {
          later = true;
          continue;
        }
        if (op.kind == Op::kKernel) {
          if (const int status = kernel_(op.task); status != 0) {
            if (!stream->failed) stream->work.fail_from(stream->marks + 1, status);  // the marks after it
            stream->failed = true;
            if (first_failure_ == 0) first_failure_ = status;
          }
        }
        if (op.kind == Op::kMark) stream->work.complete_through(++stream->marks);
        stream->ops.pop_front();
        ++stream->ran;
        --pending_;
        ran = true;
      }
      if (ran || later) continue;
      if (pending_ == 0) {
        idle_.notify_all();
        if (stopping_) return;
      }
      work_.wait(lock);
    }
  }

  const std::function<int(std::uint32_t)> kernel_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::unordered_map<Token, std::unique_ptr<Stream>> streams_;  // under `mutex_`
  std::unordered_map<Token, Op> events_;                        // under `mutex_`: the wait a record makes
  std::size_t pending_ = 0;                                     // under `mutex_`
  int first_failure_ = 0;                                       // under `mutex_`
  bool stopping_ = false;                                       // under `mutex_`
  std::thread device_;
};

}  // namespace evpool::test
