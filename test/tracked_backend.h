// Tracked<Inner>: a HostBackend, or a HostStreamBackend, (sharing the counters of the one it is made from) that also carries
// a marker, so that a test can tell whether a pool's core, which keeps the only copy, still exists:
// it must live on while leases do, and be deleted once the pool and the last lease are gone.
#pragma once

#include <memory>
#include <utility>

#include "evpool/host_backend.h"

namespace evpool::test {

template <class Inner>
struct Tracked : Inner {
  explicit Tracked(const Inner &counters) : Inner(counters) {}

  /// Move the backend into the pool after taking this: expired() then says the core is gone.
  std::weak_ptr<const int> watch() const { return marker; }

  std::shared_ptr<const int> marker = std::make_shared<const int>(0);
};
using TrackedBackend = Tracked<HostBackend>;

}  // namespace evpool::test
