// A HostBackend that counts its creates and destroys made on threads marked driver-free, as CUDA's
// own threads are (a graph user object's destructor, a host function): a test marks a thread,
// lets it Put, end leases or destroy graphs, and expects the count to stay 0.
#pragma once

#include <atomic>
#include <memory>

#include "evpool/host_backend.h"

namespace evpool::test {

/// Marks the calling thread driver-free for the rest of its life, exit included.
inline bool &this_thread_is_driver_free() {
  thread_local bool driver_free = false;
  return driver_free;
}

struct DriverFreeCheckingBackend : HostBackend {
  explicit DriverFreeCheckingBackend(const HostBackend &counters) : HostBackend(counters) {}

  handle_type create(const options_type &options, int device) {
    note();
    return HostBackend::create(options, device);
  }
  void destroy(handle_type token) noexcept {
    note();
    HostBackend::destroy(token);
  }

  /// Creates and destroys made on driver-free threads, by every copy of this backend.
  int calls_on_driver_free_threads() const { return wrong->load(); }

 private:
  void note() const noexcept {
    if (this_thread_is_driver_free()) wrong->fetch_add(1);
  }
  std::shared_ptr<std::atomic<int>> wrong = std::make_shared<std::atomic<int>>(0);
};

}  // namespace evpool::test
