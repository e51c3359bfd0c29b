// evpool: HostBackend, a backend of host tokens that stand for events, for tests and CPU benchmarks.
//
// Design rationale
// ----------------
// HostBackend lets the real pool code run where no GPU exists. Its "events" are 64-bit tokens that
// encode the device they were created on, the backend that created them, and a serial number:
//
//    63          48 47          36 35                               0
//   +--------------+--------------+----------------------------------+
//   |    device    | backend slot | serial (1, 2, 3, ... per backend) |
//   +--------------+--------------+----------------------------------+
//
// The backend slot makes tokens unique in the process, as CUDA keeps live handles unique: checked
// pools (pool_checks.h) compare handles by value across pools, and two backends that both numbered
// from 1 made a token of one backend pass for another backend's (a false double Put). A slot is
// held from the backend's creation to the destruction of its last copy, then free for a later
// backend: by then every token of the old one is gone (a backend outlives its tokens), just as CUDA
// reuses a destroyed handle's value. The serial still counts from 1 per backend, so tests can index
// tables by it.
//
// so a test can tell, from a token alone, which device it belongs to and whether two holders have
// the same one. The backend counts creates and destroys, and injects faults: a chosen create
// fails with HostBackendFault. Like the CUDA runtime it models, the current device is a property
// of the calling thread. Copies of a HostBackend share one state.
//
// Its tokens model CUDA events: never busy, and a bare token tells no device (the backend has
// neither has_pending_work nor query_device). Hence the names HostBackend and Event; the tests'
// HostStreamBackend (test/support/host_stream_backend.h) adds both and makes the tokens streams.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <utility>

#include "evpool/export.h"

namespace evpool {

/// What a HostBackend create throws when a fault was injected for it.
class EVPOOL_API HostBackendFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thread-safety: every member may be called from any number of threads (counters are atomic),
/// except inject_create_fault, which must not run concurrently with create. Copies share one state.
class EVPOOL_API HostBackend {
  struct State;

 public:
  using handle_type = std::uint64_t;
  using options_type = unsigned;
  static constexpr unsigned kDefaultOptions = 0;
  static constexpr const char *kHandleNoun = "event";  // what its tokens stand for
  static constexpr int kMaxDevices = 1 << 15;
  /// How many backends (counting copies as one) may be alive at once in a process.
  static constexpr int kMaxLiveBackends = 1 << 12;
  /// How many tokens one backend may create over its life.
  static constexpr std::uint64_t kMaxSerial = (std::uint64_t{1} << 36) - 1;

  /// The move-only owner of one token; destroys it through its backend when it dies. The backend
  /// must outlive every event it created.
  class Event {
   public:
    Event() noexcept = default;
    Event(Event &&other) noexcept
        : state_(other.state_), token_(std::exchange(other.token_, 0)),
          device_(std::exchange(other.device_, -1)) {}
    Event &operator=(Event &&other) noexcept {
      if (this != &other) {
        reset();
        state_ = other.state_;
        token_ = std::exchange(other.token_, 0);
        device_ = std::exchange(other.device_, -1);
      }
      return *this;
    }
    ~Event() { reset(); }

    handle_type get() const noexcept { return token_; }
    int device_id() const noexcept { return device_; }
    explicit operator bool() const noexcept { return token_ != 0; }

    /// Gives the token up without destroying it.
    handle_type release() noexcept {
      device_ = -1;
      return std::exchange(token_, 0);
    }
    /// Destroys the token, if any, and leaves the event empty.
    void reset() noexcept {
      if (token_ != 0) count_destroy(state_);
      token_ = 0;
      device_ = -1;
    }

   private:
    friend class HostBackend;
    Event(State *state, handle_type token, int device) noexcept
        : state_(state), token_(token), device_(device) {}

    State *state_ = nullptr;
    handle_type token_ = 0;
    int device_ = -1;
  };
  using owner_type = Event;

  /// A backend of `device_count` devices, in [1, kMaxDevices]; std::invalid_argument otherwise.
  /// std::length_error if kMaxLiveBackends backends are alive already. Thread-safe, lock-free.
  explicit HostBackend(int device_count = 1);

  /// Accepts every flag value: tokens have no flags.
  void validate_options(unsigned) const noexcept {}

  /// A new token of `device`, unique among the live tokens of every HostBackend in the process.
  /// Thread-safe. Throws HostBackendFault if the fault predicate says so for this attempt,
  /// std::out_of_range for a device outside [0, device_count()), and std::overflow_error once the
  /// backend has created kMaxSerial tokens.
  handle_type create(unsigned flags, int device);
  /// Counts the token as destroyed. Thread-safe.
  void destroy(handle_type token) noexcept;
  /// Wraps `token` into an owning event that records `device` (-1: unknown).
  Event adopt(handle_type token, int device) noexcept { return Event(state_.get(), token, device); }

  int device_count() const noexcept;
  /// The calling thread's current device (initially 0), shared by all HostBackends.
  int current_device() const noexcept;
  /// Sets the calling thread's current device; std::out_of_range outside [0, device_count()).
  void set_current_device(int device) const;

  /// Makes create attempt number n (1, 2, ... counted over the backend's life) fail when
  /// `should_fail(n, device)` is true; an empty function removes the fault. Not thread-safe with
  /// respect to concurrent creates: set it while no create runs.
  void inject_create_fault(std::function<bool(std::uint64_t attempt, int device)> should_fail);

  std::uint64_t created() const noexcept;
  std::uint64_t destroyed() const noexcept;
  std::uint64_t create_attempts() const noexcept;

  static int device_of(handle_type token) noexcept { return static_cast<int>(token >> 48); }
  /// The slot of the backend that created `token`, in [0, kMaxLiveBackends).
  static int backend_slot_of(handle_type token) noexcept {
    return static_cast<int>((token >> 36) & (kMaxLiveBackends - 1));
  }
  static std::uint64_t serial_of(handle_type token) noexcept { return token & kMaxSerial; }

 private:
  static void count_destroy(State *state) noexcept;

  std::shared_ptr<State> state_;
};

}  // namespace evpool
