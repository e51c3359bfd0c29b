// evpool test support: filling a pool with idle events, and reading what it really holds idle
// from outside it. A Get that finds an idle event creates nothing, so Gets until the backend must
// create one take every idle event of the device, whatever the pool's counters say. Private;
// tests only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "evpool/host_backend.h"

namespace evpool::testing_support {

/// Gets `count` events of `device` from `pool` at once, then puts them back: afterwards the pool
/// holds at least `count` idle there (in the calling thread's cache, as far as it takes them).
template <class Pool>
void fill(Pool &pool, int device, int count) {
  std::vector<HostBackend::Event> events;
  for (int i = 0; i < count; ++i) events.push_back(pool.Get(device));
  for (HostBackend::Event &event : events) pool.Put(std::move(event));
}

/// The events `pool` held idle for `device` (every one of them, if no other thread calls the pool
/// meanwhile), followed by the one it had to create. The caller puts them back.
template <class Pool>
std::vector<HostBackend::Event> get_until_a_miss(Pool &pool, HostBackend &backend, int device) {
  std::vector<HostBackend::Event> got;
  for (const std::uint64_t created = backend.created(); backend.created() == created;)
    got.push_back(pool.Get(device));
  return got;
}

}  // namespace evpool::testing_support
