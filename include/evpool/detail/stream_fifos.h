// evpool: the poller's FIFOs of requests in progress, one per thread and stream. Private to the
// library.
//
// Design rationale
// ----------------
// Work on one stream completes in the order it was enqueued, so of the requests a thread made on
// one stream only the oldest unfinished one needs a query: while it is pending, every later one
// is too. The poller keeps a FIFO per (channel, stream handle, device, stream id: see below) and
// queries its head. A pass
// costs one query per stream with work in progress, however many requests wait behind it (a
// poller that queries every event, as pika's does, costs one per request).
//
// Catching up. When the head has completed, the requests behind it often have too: a poller that
// is busy comes back to a stream after several pieces of work ended. Asking them one by one costs
// a query each, and a query contends for the driver's locks with every thread that enqueues work
// (the queue's bottleneck: docs/completions.md). So once per pass, after a head completes, the
// poller asks the newest request of the FIFO; if it completed without error, everything before it
// did too, and the whole FIFO is finished with that one query. If it has not (or reports an error,
// which the requests before it may not share), the poller goes on one by one from the oldest. On
// H200 at 16 threads with 8 requests in flight each, this took queries per completion from 1.00 to
// 0.44 and completions per second from 411 k (one run) to 804 k (median of 3; docs/design.md).
//
// Why the channel is part of the key: a thread's requests on a stream are enqueued in the order
// it made them, but two threads' requests on one stream reach the poller in the order it happens
// to take their channels, which need not be the order in which their events were recorded. One
// FIFO per thread and stream is ordered by construction, and only such a FIFO catches up. The
// same handle can also name different streams at once: cudaStreamPerThread is each thread's own,
// and the legacy stream is each device's; the channel and the device tell them apart. Requests
// that went through the queue's shared channel (threads without a channel of their own) share
// FIFOs across threads: a FIFO's order may then differ from the stream's, and a later request at
// the head only delays the earlier ones behind it (when it completes, they have too); nothing is
// lost. Those FIFOs never catch up: their newest request completing says nothing of the others.
//
// Why the stream's lifetime id is part of the key: a handle also names different streams over
// time. cudaStreamDestroy returns at once while the stream's work goes on, and the next
// cudaStreamCreate may return the same handle (it did in 49 rounds of 50 on the H200 host). Keyed
// by handle alone, a thread's requests A and B on the first stream and C on the second shared a
// FIFO; A completed, C (the newest, on the new, idle stream) said done, and B was finished while
// its work still ran. The key holds the id the backend read when it recorded the request
// (RecordedOn::stream_id, CUDA's cudaStreamGetId), unique for the process's life, so a FIFO holds
// the requests of one stream only. A request whose id could not be read goes to a FIFO of its
// handle without an id, which never catches up: each of its requests completes on its own query
// (one of a later stream behind one of an earlier stream waits for it: a delay, never an early
// completion).
//
// Everything here belongs to the poller (one at a time), so nothing is atomic.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace evpool::detail {

template <class Request, class Channel>
class StreamFifos {
 public:
  using stream_type = typename Request::stream_type;
  using status_type = typename Request::status_type;

  /// Appends `request` (taken from `channel`) to its FIFO. Throws std::bad_alloc, leaving the
  /// request unplaced and the FIFOs as they were.
  /// `in_channel_order`: the channel's requests on one stream were recorded in the order of the
  /// channel (one thread's channel).
  void append(Channel &channel, Request &request, bool in_channel_order) {
    const std::optional<std::uint64_t> &id = request.recorded_on.stream_id;
    // With an id, the id names the stream, whatever handle named it: 0 and cudaStreamLegacy are
    // one stream, and share a FIFO (order holds across the two). Without one, the handle does.
    const stream_type named_by = id ? stream_type{} : request.stream();
    Fifo &fifo = fifos_[Key{&channel, named_by, request.device(), id.has_value(), id.value_or(0)}];
    if (fifo.oldest == nullptr) {
      // Doubling, not one more, so that each new peak of streams in progress does not reallocate
      // (may throw: nothing changed yet).
      if (active_.size() == active_.capacity())
        active_.reserve(std::max<std::size_t>(16, 2 * active_.size()));
      fifo.channel = &channel;
      fifo.in_stream_order = in_channel_order && id.has_value();
      fifo.oldest = &request;
      active_.push_back(&fifo);
    } else {
      fifo.newest->next = &request;
    }
    request.next = nullptr;
    fifo.newest = &request;
    ++channel.in_progress;
    ++in_progress_;
  }

  /// For each FIFO: asks `query(request)` of its oldest request, and while that gives a status,
  /// takes the request out and calls `finish(request, status)`, which must not throw, then asks
  /// the next; catches up once a pass (see the top), finishing every request with `success`
  /// when the newest gives it. Returns how many were finished. `finish` runs callbacks, which may
  /// ask for more completions: those go to a channel, and reach the FIFOs at the next pass, never
  /// under this loop.
  template <class Query, class Finish>
  std::size_t finish_completed(Query &&query, Finish &&finish, const status_type &success) {
    std::size_t finished = 0;
    const auto finish_oldest = [&](Fifo &fifo, const status_type &status) {
      Request &done = *std::exchange(fifo.oldest, fifo.oldest->next);
      --fifo.channel->in_progress;
      --in_progress_;
      ++finished;
      finish(done, status);
    };
    for (std::size_t i = 0; i < active_.size();) {
      Fifo &fifo = *active_[i];
      bool caught_up = !fifo.in_stream_order;
      while (fifo.oldest != nullptr) {
        const std::optional<status_type> status = query(*fifo.oldest);
        if (!status) break;
        finish_oldest(fifo, *status);
        if (caught_up || fifo.oldest == nullptr || fifo.oldest == fifo.newest) continue;
        caught_up = true;
        if (const std::optional<status_type> newest = query(*fifo.newest); newest && *newest == success)
          while (fifo.oldest != nullptr) finish_oldest(fifo, success);
      }
      if (fifo.oldest == nullptr) {
        fifo.newest = nullptr;
        active_[i] = active_.back();
        active_.pop_back();
      } else {
        ++i;
      }
    }
    if (fifos_.size() > kKeepEmptyFifos + 4 * active_.size())
      std::erase_if(fifos_, [](const auto &entry) { return entry.second.oldest == nullptr; });
    return finished;
  }

  /// Requests appended and not finished.
  std::size_t in_progress() const noexcept { return in_progress_; }

  /// A fork() child forgets its parent's requests: they are the parent's to finish.
  void forget_all() noexcept {
    active_.clear();
    fifos_.clear();
    in_progress_ = 0;
  }

 private:
  // Empty FIFOs kept for streams that come back; beyond this (and 4 per active one) they go.
  static constexpr std::size_t kKeepEmptyFifos = 64;

  struct Key {
    const Channel *channel;
    stream_type stream;
    int device;
    bool has_stream_id;
    std::uint64_t stream_id;  // 0 without one
    bool operator==(const Key &) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key &key) const noexcept {
      std::size_t h = std::hash<const void *>()(key.channel) * 31 + std::hash<stream_type>()(key.stream);
      h = h * 31 + static_cast<std::size_t>(key.device);
      return h * 31 + std::hash<std::uint64_t>()(key.stream_id) + key.has_stream_id;
    }
  };
  struct Fifo {
    Request *oldest = nullptr;
    Request *newest = nullptr;
    Channel *channel = nullptr;
    bool in_stream_order = false;
  };

  std::unordered_map<Key, Fifo, KeyHash> fifos_;  // node-based: a Fifo's address is stable
  std::vector<Fifo *> active_;                    // the FIFOs with requests, in no order
  std::size_t in_progress_ = 0;
};

}  // namespace evpool::detail
