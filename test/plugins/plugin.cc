// A plugin with a pool of its own, for tools/check-plugins: built into several shared objects
// that a host program loads with dlopen(RTLD_LOCAL), as a scheduler loads its backends. Each
// copy reports what its own pool did, so the host can tell whether one plugin's calls reached
// another plugin's (or a fork parent's) thread cache.
#include <cstdint>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"

namespace {

evpool::BasicHandlePool<evpool::HostBackend> &pool() {
  static evpool::BasicHandlePool<evpool::HostBackend> instance{evpool::HostBackend(1)};
  return instance;
}

}  // namespace

// The plugin's interface: the only symbols its version script (plugin.map) exports.
extern "C" {

/// Gets an event of the plugin's pool and puts it back (into this thread's cache); returns its
/// token.
std::uint64_t plugin_get_and_put() {
  auto event = pool().Get(0);
  const std::uint64_t token = event.get();
  pool().Put(std::move(event), 0);
  return token;
}

/// The events the plugin's pool has created (since fork() in a child: a child starts empty).
std::uint64_t plugin_events_created() { return pool().stats().total().created; }

/// Gets and puts an event of a pool that lives only for this call: its first Get registers a new
/// cache, which makes the thread's directory look at every cache it holds (of other plugins too).
/// True if that pool created its own event.
bool plugin_use_a_new_pool() {
  evpool::BasicHandlePool<evpool::HostBackend> fresh{evpool::HostBackend(1)};
  fresh.Put(fresh.Get(0), 0);
  return fresh.stats().total().created == 1;
}

}  // extern "C"
