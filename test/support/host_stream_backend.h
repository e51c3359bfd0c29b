// A HostBackend whose tokens behave as CUDA streams do towards a pool: a token can have work
// pending (the seam: a test says for how many queries), and a bare token tells its device. The
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

  /// The token reads as busy for its next `queries` queries: work enqueued by its holder that
  /// completes after that many. Only its holder may call it (as only a stream's holder enqueues).
  void make_busy(handle_type token, std::uint32_t queries) const noexcept {
    if (const auto serial = serial_of(token); serial < kTrackedSerials)
      // Relaxed: the pool passes the token on with the ordering of its own structures, and this
      // must add none, or ThreadSanitizer would miss what the pool's orders fail to order.
      pending_->queries[serial].store(queries, std::memory_order_relaxed);
  }
  /// Queries left before the token reads as idle.
  std::uint32_t pending_queries(handle_type token) const noexcept {
    const auto serial = serial_of(token);
    return serial < kTrackedSerials ? pending_->queries[serial].load(std::memory_order_relaxed) : 0;
  }
  /// Queries made, over every token.
  std::uint64_t queries() const noexcept { return pending_->made.load(std::memory_order_relaxed); }

  /// The seam's query: busy while the token has queries left, each query counting one down.
  bool has_pending_work(handle_type token) const noexcept {
    pending_->made.fetch_add(1, std::memory_order_relaxed);
    const auto serial = serial_of(token);
    if (serial >= kTrackedSerials) return false;
    std::atomic<std::uint32_t> &left = pending_->queries[serial];
    std::uint32_t seen = left.load(std::memory_order_relaxed);
    while (seen != 0 && !left.compare_exchange_weak(seen, seen - 1, std::memory_order_relaxed)) {
    }
    return seen != 0;
  }
  int query_device(handle_type token) const noexcept { return device_of(token); }

 private:
  struct Pending {
    std::unique_ptr<std::atomic<std::uint32_t>[]> queries {
      new std::atomic<std::uint32_t>[ kTrackedSerials ]()
    };
    std::atomic<std::uint64_t> made{0};
  };
  std::shared_ptr<Pending> pending_;
};

static_assert(BusyHandleBackend<HostStreamBackend> && DeviceQueryingBackend<HostStreamBackend>);
static_assert(!BusyHandleBackend<HostBackend> && !DeviceQueryingBackend<HostBackend>,
              "the event backend keeps the event paths");

}  // namespace evpool::test
