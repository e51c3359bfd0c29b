// Streams and graphs of host tokens that follow CUDA's capture rules, for the capture-aware code
// (detail/capture_aware_wait.h) in host tests: a call that CUDA refuses while a stream captures
// is recorded as refused and invalidates the captures involved, as CUDA does. So a test shows
// that the code under test makes no such call by finding `refused` empty and every capture
// still active.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "evpool/detail/capture_aware_wait.h"

namespace evpool::test {

class FakeCaptureStreams {
 public:
  using stream_type = int;
  using event_type = std::uint64_t;

  struct Call {
    std::string what;  // "record", "wait", "record external", "wait external"
    event_type event;
    int stream;
    int device;
  };

  /// Adds `stream` on `device`, capturing in `capture` if nonzero.
  void add(int stream, int device, unsigned long long capture = 0) {
    streams_[stream] = {capture != 0 ? StreamCapture{StreamCapture::kActive, capture} : StreamCapture{}, device};
  }
  void invalidate(int stream) { streams_.at(stream).capture.status = StreamCapture::kInvalidated; }
  StreamCapture state(int stream) const { return streams_.at(stream).capture; }

  /// The next give_to_graph, or the next external record, fails.
  bool fail_give_to_graph = false;
  bool fail_external_record = false;

  std::vector<Call> calls;
  std::vector<std::string> refused;  // what CUDA would have refused, each invalidating

  // ---- The seam ----------------------------------------------------------------------------------

  StreamCapture capture_of(int stream) const { return streams_.at(stream).capture; }

  int device_of(int stream, const StreamCapture &) const { return streams_.at(stream).device; }

  void record(event_type event, int stream, int device, bool external) {
    Stream &on = on_device(stream, device);
    if (external && fail_external_record) throw std::runtime_error("fake: external record failed");
    if (external && on.capture.status != StreamCapture::kActive)
      return refuse(stream, "external record outside capture");
    calls.push_back({external ? "record external" : "record", event, stream, device});
    recorded_in_[event] = on.capture.status == StreamCapture::kActive ? on.capture.id : 0;
  }

  void wait(int stream, event_type event, int device, bool external) {
    Stream &on = on_device(stream, device);
    calls.push_back({external ? "wait external" : "wait", event, stream, device});
    if (external) {
      if (on.capture.status != StreamCapture::kActive) refuse(stream, "external wait outside capture");
      return;
    }
    const unsigned long long source = recorded_in_.count(event) ? recorded_in_[event] : 0;
    const bool capturing = on.capture.status == StreamCapture::kActive;
    if (capturing && source == 0) return refuse(stream, "cudaErrorStreamCaptureIsolation");
    if (capturing && source != on.capture.id) {
      for (auto &[id, other] : streams_)
        if (other.capture.id == source) other.capture.status = StreamCapture::kInvalidated;
      return refuse(stream, "cudaErrorStreamCaptureMerge");
    }
    if (!capturing && source != 0) {
      if (!can_join_capture(stream)) {
        for (auto &[id, other] : streams_)
          if (other.capture.id == source) other.capture.status = StreamCapture::kInvalidated;
        return refuse(stream, "cudaErrorStreamCaptureImplicit");
      }
      on.capture = {StreamCapture::kActive, source};  // joins the capture
    }
  }

  void give_to_graph(int stream, detail::DeferredWork &owner) {
    if (fail_give_to_graph) {
      detail::defer(owner);
      throw std::runtime_error("fake: no user object");
    }
    owners_[streams_.at(stream).capture.id].push_back(&owner);
  }

  /// Stream 0 is the legacy default stream: it cannot join a capture, and the wait that tries
  /// invalidates the capture, as CUDA does.
  bool can_join_capture(int stream) const { return stream != 0; }

  std::string describe(int stream) const { return "stream " + std::to_string(stream); }

  // ---- The graphs ----------------------------------------------------------------------------------

  /// The owners a capture's graph holds.
  std::size_t owners_of(unsigned long long capture) const {
    return owners_.count(capture) ? owners_.at(capture).size() : 0;
  }

  /// Destroys the capture's graph, as CUDA does when its last graph and executable graph go: each
  /// owner's destructor callback, on the calling thread.
  void destroy_graph(unsigned long long capture) {
    for (detail::DeferredWork *owner : owners_[capture]) detail::on_graph_destroyed(owner);
    owners_.erase(capture);
  }

 private:
  struct Stream {
    StreamCapture capture;
    int device;
  };

  Stream &on_device(int stream, int device) {
    Stream &on = streams_.at(stream);
    if (device != on.device) throw std::logic_error("fake: a call on the wrong device");
    return on;
  }

  void refuse(int stream, const std::string &why) {
    refused.push_back(describe(stream) + ": " + why);
    if (streams_.at(stream).capture.status == StreamCapture::kActive)
      streams_.at(stream).capture.status = StreamCapture::kInvalidated;
  }

  std::map<int, Stream> streams_;
  std::map<event_type, unsigned long long> recorded_in_;  // the capture of its last record; 0: none
  std::map<unsigned long long, std::vector<detail::DeferredWork *>> owners_;
};

}  // namespace evpool::test
