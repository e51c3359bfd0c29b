// evpool scheduler model: GpuModel, streams on a GPU whose hardware queues they share.
//
// Design rationale
// ----------------
// test/support/gpu_time.h gives a GPU with a queue per stream: there no stream's work waits on
// another's except through the waits asked for, and the limit's streams take the critical path.
// On a real GPU, streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default),
// assigned round-robin as the streams are created, and each hardware queue runs its operations in
// the order they were submitted, whatever their stream. The operation at the head of a queue holds
// up every one behind it while it cannot start:
// - a kernel, until the work before it on its own stream is done (stream order);
// - a wait, until the point its event recorded is reached (cudaStreamWaitEvent binds the wait to
//   the event's last record before the call, so a wait here names that record, RecordId).
// A record never holds its queue up: the driver attaches it to the completion of the work before
// it (a kernel's completion releases it), so it is reached when its stream's work so far is done.
// Kernels of different streams run side by side (the tasks' one-thread spin kernels never fill
// the machine), each starting `start_latency` after it leaves its queue.
//
// This is what made the limit slower than evpool's stack on `mixed` on the H100
// (docs/scheduler.md): the limit enqueues the whole graph ahead on 1,005 streams, so a queue's
// head is often a wait on work not yet done, or a kernel behind its stream's running one, and
// unrelated ready work waits behind it; a stack that enqueues only tasks whose inputs are done,
// on idle streams, never meets either.
//
// A stream created with `own_queue` gets a hardware queue of its own (a replayed CUDA graph's
// branches are launched by the device, not through the connections).
//
// The host sees a point reached `seen_latency` after the GPU reached it: an event query, a stream
// query, a synchronisation all read the completion the GPU writes back to the host, which takes
// far longer than the GPU takes to order its own work after it (a wait on the same record is
// released at once). calibration.h has the figure.
//
// Host calls submit at the model's current time (when the driver call returns); queries are
// answered at the current time. Thread-safety: none (one model run).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "scheduler_model/virtual_time.h"

namespace evpool::model {

using StreamId = std::uint32_t;
using RecordId = std::uint32_t;

class GpuModel {
 public:
  GpuModel(EventLoop &loop, int connections, Time start_latency, Time seen_latency = 0)
      : loop_(loop), connections_(static_cast<std::size_t>(connections)), start_latency_(start_latency),
        seen_latency_(seen_latency) {
    queues_.resize(connections_);
  }
  GpuModel(const GpuModel &) = delete;
  GpuModel &operator=(const GpuModel &) = delete;

  StreamId create_stream(bool own_queue = false) {
    std::size_t queue = 0;
    if (own_queue) {
      queue = queues_.size();
      queues_.emplace_back();
    } else {
      queue = shared_created_++ % connections_;
    }
    streams_.push_back({queue, 0, 0});
    return static_cast<StreamId>(streams_.size() - 1);
  }
  std::size_t streams() const noexcept { return streams_.size(); }
  std::size_t queue_of(StreamId stream) const { return streams_[stream].queue; }

  void launch(StreamId stream, Time duration) { submit({Op::kKernel, stream, duration, 0}); }
  RecordId record(StreamId stream) {
    records_.push_back({});
    const auto id = static_cast<RecordId>(records_.size() - 1);
    submit({Op::kRecord, stream, 0, id});
    return id;
  }
  void wait(StreamId stream, RecordId record) { submit({Op::kWait, stream, 0, record}); }

  /// cudaEventQuery of the record's event (nothing recorded on it since).
  bool reached(RecordId record) const {
    const Record &r = records_[record];
    return r.dispatched && r.reached_at + seen_latency_ <= loop_.now();
  }
  /// cudaStreamQuery.
  bool idle(StreamId stream) const {
    const Stream &s = streams_[stream];
    return s.pending == 0 && s.busy_until + seen_latency_ <= loop_.now();
  }
  /// Calls `done` (once) when the record is reached: a thread that synchronises on it.
  void when_reached(RecordId record, std::function<void()> done) {
    Record &r = records_[record];
    if (r.dispatched) {
      call_at(r.reached_at + seen_latency_, std::move(done));
    } else {
      r.on_reached.push_back(std::move(done));
    }
  }
  /// Calls `done` once every operation submitted so far has run (cudaDeviceSynchronize); only
  /// while nothing more is submitted.
  void when_idle(std::function<void()> done) {
    idle_waiters_.push_back(std::move(done));
    check_idle();
  }

  std::uint64_t kernels() const noexcept { return kernels_; }

 private:
  struct Op {
    enum Kind : std::uint8_t { kKernel, kRecord, kWait } kind;
    StreamId stream;
    Time duration;
    RecordId record;
  };
  struct Stream {
    std::size_t queue;
    std::uint32_t pending;  // submitted, not yet out of its hardware queue
    Time busy_until;        // when the work that left the queue is done
  };
  struct Record {
    bool dispatched = false;
    Time reached_at = 0;
    std::vector<std::function<void()>> on_reached;
    std::vector<std::size_t> blocked_queues;  // hardware queues whose head waits for it
  };
  struct Queue {
    std::deque<Op> ops;
    Time retry_at = -1;  // a retry of the head is scheduled for then
  };

  // The callbacks live here, not in the loop's queue, so that those still pending when the run
  // ends are freed with the model.
  void call_at(Time when, std::function<void()> done) {
    callbacks_.push_back(std::move(done));
    loop_.at(when, &run_callback, this, callbacks_.size() - 1);
  }
  static void run_callback(void *object, std::uint64_t index) {
    auto &gpu = *static_cast<GpuModel *>(object);
    std::function<void()> done = std::move(gpu.callbacks_[index]);
    done();
  }
  static void retry(void *object, std::uint64_t queue) {
    auto &gpu = *static_cast<GpuModel *>(object);
    gpu.queues_[queue].retry_at = -1;
    gpu.advance(queue);
  }

  void submit(const Op &op) {
    ++streams_[op.stream].pending;
    ++undispatched_;
    Queue &queue = queues_[streams_[op.stream].queue];
    queue.ops.push_back(op);
    if (queue.ops.size() == 1) advance(streams_[op.stream].queue);
  }

  void retry_later(std::size_t queue, Time when) {
    Queue &q = queues_[queue];
    if (q.retry_at >= 0 && q.retry_at <= when) return;
    q.retry_at = when;
    loop_.at(when, &retry, this, queue);
  }

  // Runs the queue's head operations for as long as they can leave it.
  void advance(std::size_t queue) {
    Queue &q = queues_[queue];
    const Time now = loop_.now();
    while (!q.ops.empty()) {
      const Op op = q.ops.front();
      Stream &stream = streams_[op.stream];
      if (op.kind == Op::kKernel) {
        if (stream.busy_until > now) return retry_later(queue, stream.busy_until);
        stream.busy_until = now + start_latency_ + op.duration;
        ++kernels_;
        last_end_ = std::max(last_end_, stream.busy_until);
      } else if (op.kind == Op::kRecord) {
        Record &record = records_[op.record];
        record.dispatched = true;
        record.reached_at = std::max(now, stream.busy_until);
        for (std::function<void()> &done : record.on_reached)
          call_at(record.reached_at + seen_latency_, std::move(done));
        record.on_reached.clear();
        for (const std::size_t blocked : record.blocked_queues) retry_later(blocked, record.reached_at);
        record.blocked_queues.clear();
      } else {
        Record &record = records_[op.record];
        if (!record.dispatched) {
          record.blocked_queues.push_back(queue);
          return;
        }
        if (record.reached_at > now) return retry_later(queue, record.reached_at);
      }
      q.ops.pop_front();
      --stream.pending;
      --undispatched_;
    }
    check_idle();
  }

  void check_idle() {
    if (undispatched_ != 0 || idle_waiters_.empty()) return;
    for (std::function<void()> &done : idle_waiters_) call_at(last_end_ + seen_latency_, std::move(done));
    idle_waiters_.clear();
  }

  EventLoop &loop_;
  std::size_t connections_;
  Time start_latency_;
  Time seen_latency_;
  std::size_t shared_created_ = 0;
  std::vector<Queue> queues_;
  std::vector<Stream> streams_;
  std::vector<Record> records_;
  std::vector<std::function<void()>> idle_waiters_;
  std::deque<std::function<void()>> callbacks_;
  std::uint64_t undispatched_ = 0;
  std::uint64_t kernels_ = 0;
  Time last_end_ = 0;
};

}  // namespace evpool::model
