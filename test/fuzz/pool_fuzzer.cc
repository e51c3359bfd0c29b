// libFuzzer target: random sequences of Get, Put, Purge, current-device changes and injected
// create faults on a 3-device BasicHandlePool<HostBackend>, each checked against a sequential model
// (a LIFO stack of idle tokens per device). Any difference traps.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"

namespace {

constexpr int kDevices = 3;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

class Input {
 public:
  Input(const std::uint8_t *data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return position_ >= size_; }
  std::uint8_t next() { return position_ < size_ ? data_[position_++] : 0; }

 private:
  const std::uint8_t *data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

// A device argument: mostly valid, sometimes -1, sometimes out of range.
int device_argument(std::uint8_t byte) {
  static constexpr int kChoices[] = {0, 1, 2, -1, -1, 3, -2, 1 << 30};
  return kChoices[byte % 8];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using evpool::HostBackend;
  HostBackend backend(kDevices);
  backend.set_current_device(0);
  std::vector<HostBackend::Event> held;
  std::uint64_t created = 0, destroyed = 0;
  {
    evpool::BasicHandlePool<HostBackend> pool(backend);
    std::vector<std::uint64_t> idle[kDevices];  // the model
    Input input(data, size);
    while (!input.empty()) {
      const std::uint8_t op = input.next();
      const std::uint8_t argument = input.next();
      switch (op % 6) {
        case 0:
        case 1: {  // Get
          const int requested = device_argument(argument);
          const int device = requested == -1 ? backend.current_device() : requested;
          if (device < 0 || device >= kDevices) {
            bool threw = false;
            try {
              pool.Get(requested);
            } catch (const std::out_of_range &) {
              threw = true;
            }
            require(threw);
            break;
          }
          HostBackend::Event event = pool.Get(requested);
          if (idle[device].empty()) {
            ++created;
            require(HostBackend::serial_of(event.get()) == created);
          } else {
            require(event.get() == idle[device].back());
            idle[device].pop_back();
          }
          require(event.device_id() == device && HostBackend::device_of(event.get()) == device);
          held.push_back(std::move(event));
          break;
        }
        case 2:
        case 3: {  // Put
          if (held.empty()) break;
          HostBackend::Event &event = held[argument % held.size()];
          const std::uint64_t token = event.get();
          const int own = event.device_id();
          const int requested = (op / 6) % 2 == 0 ? -1 : device_argument(argument / 8);
          const bool out_of_range = requested != -1 && (requested < 0 || requested >= kDevices);
          const bool contradicts = !out_of_range && requested != -1 && requested != own;
          if (out_of_range || contradicts) {
            bool threw = false;
            try {
              pool.Put(std::move(event), requested);
            } catch (const std::out_of_range &) {
              threw = out_of_range;
            } catch (const std::invalid_argument &) {
              threw = contradicts;
            }
            require(threw && event.get() == token);  // refused: the caller still owns it
            break;
          }
          pool.Put(std::move(event), requested);
          require(!event);
          idle[own].push_back(token);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(argument % held.size()));
          break;
        }
        case 4:  // Purge
          pool.Purge();
          for (auto &tokens : idle) {
            destroyed += tokens.size();
            tokens.clear();
          }
          break;
        case 5: {  // change the current device, or make the next create fail
          if (argument % 2 == 0) {
            backend.set_current_device(argument / 2 % kDevices);
            break;
          }
          const int device = argument / 2 % kDevices;
          if (!idle[device].empty()) break;
          const std::uint64_t failing = backend.create_attempts() + 1;
          backend.inject_create_fault([failing](std::uint64_t attempt, int) { return attempt == failing; });
          bool threw = false;
          try {
            pool.Get(device);
          } catch (const evpool::HostBackendFault &) {
            threw = true;
          }
          backend.inject_create_fault({});
          require(threw);
          break;
        }
      }
      require(backend.created() == created && backend.destroyed() == destroyed);
    }
    for (auto &tokens : idle) destroyed += tokens.size();
  }
  require(backend.destroyed() == destroyed);  // the pool's destructor destroyed exactly the idle ones
  held.clear();
  require(backend.created() == backend.destroyed());
  return 0;
}
