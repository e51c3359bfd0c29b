// A HostBackend whose tokens behave as CUDA streams do towards a pool: a token can have work
// pending (the seam: a test says for how long its work lasts, on a clock that is either the count
// of queries, of any token, or ticks the test gives: Clock), and a bare token tells its device.
// The pool's core then takes the stream paths (BusyHandleBackend, DeviceQueryingBackend), so that
// every host test of the pool can run for streams too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "evpool/handle_backend.h"
#include "evpool/host_backend.h"

namespace evpool::test {

class HostStreamBackend : public HostBackend {
 public:
  /// Tokens with a serial below this can be made busy; later ones are always idle.
  static constexpr std::uint64_t kTrackedSerials = std::uint64_t{1} << 20;
  static constexpr const char *kHandleNoun = "stream";  // in the pool's error messages

  /// What the work's durations count: every query of any token (the pool's asking is the clock),
  /// or ticks the test gives with advance() (time passes whether or not the pool asks).
  enum class Clock { kQueries, kTicks };

  explicit HostStreamBackend(int device_count = 1, Clock clock = Clock::kQueries)
      : HostBackend(device_count), pending_(std::make_shared<Pending>()) {
    pending_->ticks_are_time = clock == Clock::kTicks;
  }

  /// The token's work completes once the clock has moved by `queries` (Clock::kQueries: it reads
  /// as busy to each of the next `queries` queries, of any token). Only its holder may call it
  /// (as only a stream's holder enqueues).
  void make_busy(handle_type token, std::uint32_t queries) const noexcept {
    const auto serial = serial_of(token);
    if (serial >= kTrackedSerials) return;
    const std::uint64_t now =
        pending_->ticks_are_time ? pending_->ticks.load(std::memory_order_relaxed) : this->queries();
    // Relaxed: the pool passes the token on with the ordering of its own structures, and this
    // must add none, or ThreadSanitizer would miss what the pool's orders fail to order.
    pending_->done_after[serial].store(now + queries, std::memory_order_relaxed);
    pending_->answered_idle[serial].store(false, std::memory_order_relaxed);
  }
  /// Whether the token may be held now: never made busy, or answered idle to a query since it
  /// last was. Exact under concurrency, for a token its caller holds: only a Get of that very
  /// token, on the caller's thread, queried it since its holder made it busy.
  bool asked_idle_since_busy(handle_type token) const noexcept {
    const auto serial = serial_of(token);
    return serial >= kTrackedSerials || pending_->answered_idle[serial].load(std::memory_order_relaxed);
  }
  /// Queries made, over every token.
  std::uint64_t queries() const noexcept { return pending_->made.load(std::memory_order_relaxed); }
  /// Clock::kTicks: time passes by `ticks`. Any thread may call it.
  void advance(std::uint64_t ticks = 1) const noexcept {
    pending_->ticks.fetch_add(ticks, std::memory_order_relaxed);
  }

  /// The seam's query: busy if the token's work completes after now (kQueries: the query is a tick
  /// of the clock itself).
  bool has_pending_work(handle_type token) const noexcept {
    const std::uint64_t queried = pending_->made.fetch_add(1, std::memory_order_relaxed) + 1;
    // kQueries: this query is the tick, and the work is busy through it; kTicks: busy until the
    // clock reaches its end.
    const std::uint64_t now =
        pending_->ticks_are_time ? pending_->ticks.load(std::memory_order_relaxed) + 1 : queried;
    const auto serial = serial_of(token);
    if (serial >= kTrackedSerials) return false;
    const bool busy = pending_->done_after[serial].load(std::memory_order_relaxed) >= now;
    if (!busy) pending_->answered_idle[serial].store(true, std::memory_order_relaxed);
    return busy;
  }
  int query_device(handle_type token) const noexcept { return device_of(token); }

 private:
  struct Pending {
    std::unique_ptr<std::atomic<std::uint64_t>[]> done_after {
      new std::atomic<std::uint64_t>[ kTrackedSerials ]()
    };
    std::unique_ptr<std::atomic<bool>[]> answered_idle { new std::atomic<bool>[ kTrackedSerials ] };
    Pending() {
      for (std::uint64_t serial = 0; serial < kTrackedSerials; ++serial)
        answered_idle[serial].store(true, std::memory_order_relaxed);  // never busy yet
    }
    std::atomic<std::uint64_t> made{0};
    std::atomic<std::uint64_t> ticks{0};
    bool ticks_are_time = false;
  };
  std::shared_ptr<Pending> pending_;
};

static_assert(BusyHandleBackend<HostStreamBackend> && DeviceQueryingBackend<HostStreamBackend>);
static_assert(!BusyHandleBackend<HostBackend> && !DeviceQueryingBackend<HostBackend>,
              "the event backend keeps the event paths");

}  // namespace evpool::test
