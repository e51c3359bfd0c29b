// evpool: which signalled request's event the poller may query, one device at a time. Private to
// the library.
//
// Design rationale
// ----------------
// With completion signals (CompletionSignal::kAuto) the poller reads a word where it would have
// queried an event, and queries the event only to learn an error: a write behind failed work never
// lands (signal_slots.h). Each pending request used to have its own event queried once per
// `signal_query_interval`, so the queries grew with the streams in progress: 512 pending FIFOs
// at 1 ms cost 512,000 queries a second, the driver's serialised calls that the signals exist to
// avoid. Here the queries of requests whose signals have not landed are bounded per device: at
// most one per `signal_query_interval` (one per pass for an interval of 0), however many requests
// are pending on it.
//
// Why one query per device catches what one per request did. A fault in the work makes the
// context's error sticky: the device runs nothing more, and every call on the context reports the
// error, the query of any of its events included (CUDA's runtime documents each asynchronous
// kernel error, cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert and the rest, as
// leaving the context unusable, "any further CUDA work will return the same error"). So the first
// query on the device after the fault, whichever request's event it asks, hears the error. Once
// an event of a device has told an error, every request of that device whose signal has not landed
// is asked at once, in the same pass (the queue sweeps its FIFOs a second time when the error came
// after some of them were passed over), so that each gets its own status. An error confined to
// one stream, whose signal then never lands (CUDA documents none: its asynchronous errors are
// sticky), is still heard: each query goes to a request not yet asked in the current round, and a
// request first found missing after the pass that began the round joins the next round, so that
// requests that keep arriving (in front of it, where a finished FIFO's place is taken) cannot
// keep the round from reaching an older one. So each request pending when a round begins is asked
// within that round, one query an interval: within about N intervals for N requests pending on the
// device, then the next round's newcomers. A signal that lands is read, never queried, as before.
//
// Each request still waits one interval after its signal is first found missing before its event
// may be asked: most requests complete within it, and a query then would be wasted.
//
// Everything here belongs to the poller (one thread at a time, under the queue's `polling_`), so
// nothing is atomic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace evpool::detail {

/// What a request keeps for its device's probe: poller-private.
struct ProbeMarks {
  /// When (steady clock, ns) its event may first be queried; 0 until its signal is first found
  /// missing.
  std::int64_t query_from = 0;
  /// The device's round in which its event was last queried as the probe; 0: never.
  std::uint64_t probed_in_round = 0;
  /// The last pass (SignalProbes' count) whose query of its event said "pending": the pass does
  /// not ask again (a second sweep, after an error, asks the others).
  std::uint64_t pending_in_pass = 0;
};

class SignalProbes {
 public:
  /// Makes room for `device`'s state (-1: a device that could not be found). Throws std::bad_alloc,
  /// changing nothing.
  void make_room_for(int device) {
    if (index(device) >= probes_.size()) probes_.resize(index(device) + 1);
  }

  /// Whether the event of `request`, whose signal has not landed at `now`, is to be queried now;
  /// marks it and the device's probe as asked if so. `device` has room (make_room_for()).
  bool may_query(int device, ProbeMarks &request, std::int64_t now, std::int64_t interval) noexcept {
    Probe &probe = probes_[index(device)];
    if (request.pending_in_pass == pass_) return false;
    if (probe.error_heard) return true;
    if (!due(probe, request, now, interval)) {
      probe.passed_over = true;
      return false;
    }
    request.probed_in_round = probe.round;
    probe.probed_this_pass = true;
    probe.next_probe = now + interval;
    return true;
  }

  /// The query that may_query() allowed said the request's work is pending.
  void told_pending(ProbeMarks &request) const noexcept { request.pending_in_pass = pass_; }

  /// An event of `device` told an error: the device's other requests are asked at once, for the
  /// rest of the pass. Returns whether this is the device's first error of the pass and a request
  /// of the device was passed over before it: the queue then sweeps its FIFOs again to reach it.
  bool error_heard(int device) noexcept {
    Probe &probe = probes_[index(device)];
    return !std::exchange(probe.error_heard, true) && probe.passed_over;
  }

  /// The pass is over: a device whose probe was due but found every eligible request asked in
  /// this round starts a new round (the next pass asks again), and the pass's marks are cleared.
  void end_pass() noexcept {
    for (Probe &probe : probes_) {
      if (probe.round_exhausted && !probe.probed_this_pass) {
        ++probe.round;
        probe.asked_in_round = false;
      } else if (probe.probed_this_pass) {
        probe.asked_in_round = true;  // from the next pass on: those seen in this one are the round's
      }
      probe.probed_this_pass = probe.round_exhausted = probe.error_heard = probe.passed_over = false;
    }
    ++pass_;
  }

 private:
  struct Probe {
    std::int64_t next_probe = 0;  // when (steady clock, ns) the device's next query may be made
    std::uint64_t round = 1;      // requests asked in this round wait for the next
    bool asked_in_round = false;  // a pass before this one asked in this round: newcomers wait for the next
    bool probed_this_pass = false;
    bool round_exhausted = false;  // this pass met a request asked in this round while the probe was due
    bool error_heard = false;      // this pass: an event of the device told an error
    bool passed_over = false;      // this pass: a request of the device was not asked
  };

  static bool due(Probe &probe, ProbeMarks &request, std::int64_t now, std::int64_t interval) noexcept {
    if (request.query_from == 0) {
      request.query_from = now + interval;
      if (probe.asked_in_round) request.probed_in_round = probe.round;  // joins the next round
      if (interval != 0) return false;
    } else if (now < request.query_from) {
      return false;
    }
    if (probe.probed_this_pass || now < probe.next_probe) return false;
    if (request.probed_in_round == probe.round) {
      probe.round_exhausted = true;  // asked in this round: the others first
      return false;
    }
    return true;
  }

  static std::size_t index(int device) noexcept { return static_cast<std::size_t>(device + 1); }

  std::vector<Probe> probes_;  // by device + 1
  std::uint64_t pass_ = 1;     // counts passes, so that a request's 0 means "never asked"
};

}  // namespace evpool::detail
