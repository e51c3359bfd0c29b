// evpool: the rules of stream capture for a dependency between two streams, and events that a
// graph owns; written once over a seam, so that the host tests run them too. Private to the
// library.
//
// Design rationale
// ----------------
// While a stream captures (cudaStreamBeginCapture), CUDA refuses some calls on it, and a refused
// call also invalidates the capture: cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated. cudaStreamGetDevice is one of them (measured on the H200
// host), and a wait across the capture boundary is another. So every step here first asks both
// streams for their capture state, a query CUDA allows on any stream at any time, and decides
// from the two states alone, before any call that could be refused:
//
//   producer        consumer        what the wait becomes
//   not capturing   not capturing   an eager wait (record, wait), as without graphs
//   capture X       capture X       a fork/join edge of X's graph (the event: see below)
//   capture X       not capturing   the consumer joins capture X (CUDA's fork); refused for the
//                                   legacy default stream, which cannot join one (CUDA:
//                                   cudaErrorStreamCaptureImplicit, and X is invalidated)
//   not capturing   capture X       refused: a capture cannot wait on work outside it (CUDA:
//                                   cudaErrorStreamCaptureIsolation)
//   capture X       capture Y       refused: two captures cannot merge (cudaErrorStreamCaptureMerge)
//   invalidated     any             refused: that capture is already lost
//
// A refusal throws std::invalid_argument naming both streams' states and what to do instead
// (graph_event.h), and leaves every capture valid.
//
// Within a capture the graph keeps the edge, not the event, so the event could go back to the
// pool at once. It does not: it goes to the capture's graph, as a graph-owned event does, and
// comes back when the graph is destroyed. The reason is the driver: an event recorded in one open
// capture and then, by another thread, in another open capture crashes it (H200, driver 580: a
// program with no evpool code, 16 threads capturing at once with their events from one shared
// list, segfaulted in 4 of 5 runs, 64 threads in 5 of 5; captures one at a time, 0 of 15). A pool
// hands an event it got back to any thread, so only an event that stays out until its capture is
// over is safe, and the graph's end is the first moment evpool can see.
//
// The devices come from a lookup that capture allows (Streams::device_of), so the event is one of
// the producer's device in every case.
//
// Graph-owned events (record_external / wait_external below) are for the two refused crossings:
// an external node records or waits on a real event at each launch, so the event must live as
// long as the graph. Its owner, holding a lease, is handed to the graph as a user object; CUDA
// destroys it on one of its own threads, where no CUDA call is allowed, so the owner's destructor
// callback only defers it (deferred_work.h), and the lease ends on the next call that may call
// the driver.
//
// Streams, the seam (src/cuda_stream_ops.h for CUDA, test/support/fake_capture.h for the tests):
//   stream_type, event_type (handles)
//   capture_of(stream) -> StreamCapture      never refused, never invalidates
//   device_of(stream, capture) -> int        a lookup that capture allows
//   record(event, stream, device, external)  cudaEventRecord(WithFlags), on `device`
//   wait(stream, event, device, external)    cudaStreamWaitEvent, on `device`
//   give_to_graph(stream, owner)             the capture's graph owns `owner` (a DeferredWork
//                                            whose run() deletes it) and calls
//                                            on_graph_destroyed(&owner) when it is destroyed;
//                                            if it cannot, it defers `owner` and throws
//   can_join_capture(stream) -> bool         false for the legacy default stream
//   describe(stream) -> std::string          for messages
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "evpool/deferred_work.h"

namespace evpool {

/// A stream's capture state, as the capture-aware functions see it.
struct StreamCapture {
  enum Status { kNone, kActive, kInvalidated };
  Status status = kNone;
  unsigned long long id = 0;  ///< the capture's id while kActive
};

namespace detail {

template <class S>
concept CaptureStreams = requires(S &streams, typename S::stream_type stream, typename S::event_type event,
                                  StreamCapture capture, int device, DeferredWork &owner) {
  { streams.capture_of(stream) } -> std::same_as<StreamCapture>;
  { streams.device_of(stream, capture) } -> std::same_as<int>;
  streams.record(event, stream, device, true);
  streams.wait(stream, event, device, true);
  streams.give_to_graph(stream, owner);
  { streams.can_join_capture(stream) } -> std::same_as<bool>;
  { streams.describe(stream) } -> std::convertible_to<std::string>;
};

/// What a graph's user object calls when the graph is destroyed, on a thread where no CUDA call is
/// allowed: it only hands the owner over to run later.
inline void on_graph_destroyed(void *owner) noexcept { defer(*static_cast<DeferredWork *>(owner)); }

inline std::string describe_capture(const StreamCapture &capture) {
  switch (capture.status) {
    case StreamCapture::kNone: return "not capturing";
    case StreamCapture::kActive: return "capturing (capture " + std::to_string(capture.id) + ")";
    case StreamCapture::kInvalidated: return "in an invalidated capture";
  }
  return "in an unknown capture state";
}

/// Throws std::invalid_argument, naming both streams' states, unless a wait of `consumer` on
/// `producer` is one CUDA allows (see the table above). Makes no CUDA call but the queries.
template <CaptureStreams Streams>
void check_capturable_wait(Streams &streams, typename Streams::stream_type consumer, const StreamCapture &consumes,
                           typename Streams::stream_type producer, const StreamCapture &produces) {
  const bool isolated = consumes.status == StreamCapture::kActive && produces.status == StreamCapture::kNone;
  const bool merging = consumes.status == StreamCapture::kActive &&
                       produces.status == StreamCapture::kActive && consumes.id != produces.id;
  const bool lost =
      consumes.status == StreamCapture::kInvalidated || produces.status == StreamCapture::kInvalidated;
  const bool unjoinable = consumes.status == StreamCapture::kNone &&
                          produces.status == StreamCapture::kActive && !streams.can_join_capture(consumer);
  if (!isolated && !merging && !lost && !unjoinable) return;
  std::string message = "evpool::wait: the consumer, " + std::string(streams.describe(consumer)) + ", is " +
                        describe_capture(consumes) + ", and the producer, " +
                        std::string(streams.describe(producer)) + ", is " + describe_capture(produces) + ": ";
  if (lost)
    message += "a capture that CUDA invalidated cannot take the wait; end it, and capture again";
  else if (unjoinable)
    message += "the legacy default stream cannot join a capture (CUDA would fail with "
               "cudaErrorStreamCaptureImplicit and invalidate the capture); wait on a stream of your own, or on "
               "evpool::record_external(producer) after the graph is launched";
  else if (isolated)
    message += "a capture cannot wait on work outside it (CUDA would fail with cudaErrorStreamCaptureIsolation "
               "and invalidate the capture); inside the capture, take evpool::wait_external(consumer) and record "
               "that event on the producer before each launch";
  else
    message += "two captures cannot wait on each other (CUDA would fail with cudaErrorStreamCaptureMerge and "
               "invalidate both); end the producer's capture with evpool::record_external(producer), and wait on "
               "that event after its graph is launched";
  throw std::invalid_argument(message + ". Nothing was recorded; every capture is as it was");
}

/// Leases an event of `device` and gives the lease to the graph of `stream`'s capture (active):
/// the event is back when the graph is destroyed. Throws what the pool and the streams throw;
/// once the graph has the lease (or it is deferred), the event comes back through it.
template <CaptureStreams Streams, class Pool>
typename Streams::event_type lease_to_graph(Streams &streams, typename Streams::stream_type stream,
                                            Pool &pool, int device) {
  using Lease = decltype(pool.Lease(device));
  // The owner is its own deferred work: CUDA's destructor callback only defers it, and its run()
  // deletes it, which ends the lease on a thread that may call the driver.
  struct Owner final : DeferredWork {
    explicit Owner(Lease &&taken) noexcept : lease(std::move(taken)) {}
    void run() noexcept override { delete this; }
    Lease lease;
  };
  auto owner = std::make_unique<Owner>(pool.Lease(device));
  const typename Streams::event_type event = owner->lease.get();
  streams.give_to_graph(stream, *owner.release());  // the graph's, or deferred, from here on
  return event;
}

/// evpool::wait over any streams and any pool with Lease(device): see the rationale.
template <CaptureStreams Streams, class Pool>
void capture_aware_wait(Streams &streams, typename Streams::stream_type consumer,
                        typename Streams::stream_type producer, Pool &pool) {
  const StreamCapture produces = streams.capture_of(producer);
  const StreamCapture consumes = streams.capture_of(consumer);
  check_capturable_wait(streams, consumer, consumes, producer, produces);
  const int producer_device = streams.device_of(producer, produces);
  const int consumer_device = streams.device_of(consumer, consumes);
  // Inside a capture the graph keeps the event; outside, the lease returns it however this ends.
  std::optional<decltype(pool.Lease(producer_device))> lease;
  typename Streams::event_type event;
  if (produces.status == StreamCapture::kActive) {
    event = lease_to_graph(streams, producer, pool, producer_device);
  } else {
    lease.emplace(pool.Lease(producer_device));
    event = lease->get();
  }
  streams.record(event, producer, producer_device, /*external=*/false);
  streams.wait(consumer, event, consumer_device, /*external=*/false);
}

/// A pooled event that a graph owns, and its device.
template <class Event>
struct GraphOwned {
  Event event;
  int device;
};

/// Leases an event of the capturing stream's device, gives its lease to the capture's graph, and
/// records it (`record`) or waits on it (otherwise) as an external node. Throws
/// std::invalid_argument, holding nothing, unless `stream` is in an active capture; what the
/// streams and the pool throw. Once the graph owns the lease, a failure leaves it there: the event
/// returns when the graph is destroyed.
template <CaptureStreams Streams, class Pool>
auto graph_owned_event(Streams &streams, typename Streams::stream_type stream, Pool &pool, bool record)
    -> GraphOwned<typename Streams::event_type> {
  const char *operation = record ? "evpool::record_external" : "evpool::wait_external";
  const StreamCapture capture = streams.capture_of(stream);
  if (capture.status != StreamCapture::kActive)
    throw std::invalid_argument(std::string(operation) + ": " + std::string(streams.describe(stream)) +
                                " is " + describe_capture(capture) +
                                "; a graph-owned event is taken inside an active capture. Nothing was taken");
  const int device = streams.device_of(stream, capture);
  const GraphOwned<typename Streams::event_type> owned{lease_to_graph(streams, stream, pool, device), device};
  if (record)
    streams.record(owned.event, stream, device, /*external=*/true);
  else
    streams.wait(stream, owned.event, device, /*external=*/true);
  return owned;
}

}  // namespace detail
}  // namespace evpool
