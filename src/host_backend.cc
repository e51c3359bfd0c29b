#include "evpool/host_backend.h"

#include "evpool/detail/device_ordinal.h"

#include <array>
#include <bit>
#include <stdexcept>
#include <string>
#include <utility>

namespace evpool {

namespace {

thread_local int current_host_device = 0;

// The slots of the live backends, a bit each (host_backend.h says why tokens carry one). A bitmap
// of atomic words rather than a mutex: a fork() child may construct a backend while a thread of
// the parent, which does not exist in the child, was claiming a slot.
class BackendSlots {
 public:
  static int claim() {
    for (std::size_t word = 0; word < words_.size(); ++word) {
      std::uint64_t taken = words_[word].load(std::memory_order_relaxed);
      while (~taken != 0) {
        const int bit = std::countr_one(taken);
        // Relaxed: a slot only keeps tokens apart, no data is published with it.
        if (words_[word].compare_exchange_weak(taken, taken | (std::uint64_t{1} << bit), std::memory_order_relaxed))
          return static_cast<int>(word) * 64 + bit;
      }
    }
    throw std::length_error("evpool: more than " + std::to_string(HostBackend::kMaxLiveBackends) +
                            " HostBackends alive at once");
  }
  static void give_back(int slot) noexcept {
    words_[static_cast<std::size_t>(slot / 64)].fetch_and(~(std::uint64_t{1} << (slot % 64)),
                                                          std::memory_order_relaxed);
  }

 private:
  static inline std::array<std::atomic<std::uint64_t>, HostBackend::kMaxLiveBackends / 64> words_{};
};

}  // namespace

struct HostBackend::State {
  explicit State(int devices) : device_count(devices), slot(BackendSlots::claim()) {}
  ~State() { BackendSlots::give_back(slot); }
  State(const State &) = delete;
  State &operator=(const State &) = delete;

  const int device_count;
  const int slot;  // the backend's bits in each of its tokens
  // Relaxed throughout: the counters are statistics and serial numbers, read once the threads
  // that changed them have been joined (which orders them); no other memory hangs off them.
  std::atomic<std::uint64_t> create_attempts{0};
  std::atomic<std::uint64_t> created{0};
  std::atomic<std::uint64_t> destroyed{0};
  std::atomic<std::uint64_t> next_serial{1};
  std::function<bool(std::uint64_t, int)> should_fail;
};

HostBackend::HostBackend(int device_count) {
  if (device_count < 1 || device_count > kMaxDevices)
    throw std::invalid_argument("evpool: HostBackend device count " + std::to_string(device_count) +
                                " is outside [1, " + std::to_string(kMaxDevices) + "]");
  state_ = std::make_shared<State>(device_count);
}

HostBackend::handle_type HostBackend::create(unsigned /*flags*/, int device) {
  detail::check_device_ordinal(device, state_->device_count, "HostBackend::create");
  const std::uint64_t attempt = state_->create_attempts.fetch_add(1, std::memory_order_relaxed) + 1;
  if (state_->should_fail && state_->should_fail(attempt, device))
    throw HostBackendFault("evpool: injected fault in HostBackend create attempt " + std::to_string(attempt) +
                           " on device " + std::to_string(device));
  const std::uint64_t serial = state_->next_serial.fetch_add(1, std::memory_order_relaxed);
  if (serial > kMaxSerial)
    throw std::overflow_error("evpool: HostBackend has created its " + std::to_string(kMaxSerial) +
                              " tokens; no serial number is left");
  state_->created.fetch_add(1, std::memory_order_relaxed);
  return (static_cast<std::uint64_t>(device) << 48) | (static_cast<std::uint64_t>(state_->slot) << 36) | serial;
}

void HostBackend::destroy(handle_type /*token*/) noexcept { count_destroy(state_.get()); }

void HostBackend::count_destroy(State *state) noexcept {
  state->destroyed.fetch_add(1, std::memory_order_relaxed);
}

int HostBackend::device_count() const noexcept { return state_->device_count; }

int HostBackend::current_device() const noexcept { return current_host_device; }

void HostBackend::set_current_device(int device) const {
  detail::check_device_ordinal(device, state_->device_count, "HostBackend::set_current_device");
  current_host_device = device;
}

void HostBackend::inject_create_fault(std::function<bool(std::uint64_t, int)> should_fail) {
  state_->should_fail = std::move(should_fail);
}

std::uint64_t HostBackend::created() const noexcept {
  return state_->created.load(std::memory_order_relaxed);
}
std::uint64_t HostBackend::destroyed() const noexcept {
  return state_->destroyed.load(std::memory_order_relaxed);
}
std::uint64_t HostBackend::create_attempts() const noexcept {
  return state_->create_attempts.load(std::memory_order_relaxed);
}

}  // namespace evpool
