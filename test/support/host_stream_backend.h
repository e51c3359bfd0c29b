// A HostBackend whose tokens behave as CUDA streams do towards a pool: a token can have work
// pending (the seam: a test says for how many queries, of any token, its work lasts: the queries
// are the clock), and a bare token tells its device. The
// pool's core then takes the stream paths (BusyHandleBackend, DeviceQueryingBackend), so that
// every host test of the pool can run for streams too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "evpool/event_backend.h"
#include "evpool/host_backend.h"

namespace evpool::test {

class HostStreamBackend : public HostBackend {
 public:
  /// Tokens with a serial below this can be made busy; later ones are always idle.
  static constexpr std::uint64_t kTrackedSerials = std::uint64_t{1} << 20;

  explicit HostStreamBackend(int device_count = 1)
      : HostBackend(device_count), pending_(std::make_shared<Pending>()) {}

  /// The token's work completes after the next `queries` queries, of any token: it reads as
  /// busy to each of them. Only its holder may call it (as only a stream's holder enqueues).
  void make_busy(handle_type token, std::uint32_t queries) const noexcept {
    const auto serial = serial_of(token);
    if (serial >= kTrackedSerials) return;
    // Relaxed: the pool passes the token on with the ordering of its own structures, and this
    // must add none, or ThreadSanitizer would miss what the pool's orders fail to order.
    pending_->done_after[serial].store(this->queries() + queries, std::memory_order_relaxed);
    pending_->answered_idle[serial].store(false, std::memory_order_relaxed);
  }
  /// Whether the token may be held now: never made busy, or answered idle to a query since it
  /// last was. Exact under concurrency, for a token its caller holds: only a Get of that very
  /// token, on the caller's thread, queried it since its holder made it busy.
  bool asked_idle_since_busy(handle_type token) const noexcept {
    const auto serial = serial_of(token);
    return serial >= kTrackedSerials || pending_->answered_idle[serial].load(std::memory_order_relaxed);
  }
  /// Queries made, over every token: the seam's clock.
  std::uint64_t queries() const noexcept { return pending_->made.load(std::memory_order_relaxed); }

  /// The seam's query: one tick of the clock; busy if the token's work completes after it.
  bool has_pending_work(handle_type token) const noexcept {
    const std::uint64_t now = pending_->made.fetch_add(1, std::memory_order_relaxed) + 1;
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
  };
  std::shared_ptr<Pending> pending_;
};

static_assert(BusyHandleBackend<HostStreamBackend> && DeviceQueryingBackend<HostStreamBackend>);
static_assert(!BusyHandleBackend<HostBackend> && !DeviceQueryingBackend<HostBackend>,
              "the event backend keeps the event paths");

}  // namespace evpool::test
