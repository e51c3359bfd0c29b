// Compiled (not run) for other targets by tools/check-portability: instantiates the lock-free core
// with a minimal backend, so that the static_asserts on lock-freedom, sizes and alignments are
// checked for that target with that compiler (GCC and Clang, x86-64 and aarch64).
#include <atomic>
#include <cstdint>
#include <utility>

#include "evpool/basic_handle_pool.h"
#include "evpool/pool_policy.h"

namespace {

struct Token {
  std::uint64_t value = 0;
  int device = -1;
  std::uint64_t get() const noexcept { return value; }
  std::uint64_t release() noexcept { return std::exchange(value, 0); }
  int device_id() const noexcept { return device; }
  explicit operator bool() const noexcept { return value != 0; }
};

struct MinimalBackend {
  using handle_type = std::uint64_t;
  using owner_type = Token;
  using options_type = unsigned;
  static constexpr unsigned kDefaultOptions = 0;
  void validate_options(unsigned) const {}
  handle_type create(unsigned, int) { return 1; }
  void destroy(handle_type) noexcept {}
  Token adopt(handle_type handle, int device) noexcept { return Token{handle, device}; }
  int device_count() const { return 1; }
  int current_device() const { return 0; }
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the tagged head must be lock-free without libatomic on this target");

}  // namespace

template class evpool::BasicHandlePool<MinimalBackend>;
template class evpool::BasicHandlePool<MinimalBackend, evpool::ExponentialBackoffPolicy<>>;
