// evpool: a pool's cap per device, and what Get throws when the cap cannot be kept.
//
// A pool may be given a cap: the most handles of one device it keeps at once, idle, busy, retired
// or leased. Get creates a handle only below the cap; at the cap it waits for one of the pool's
// busy handles to complete (their work on the GPU ends the wait), and throws PoolCapReached only
// when the pool holds none of the device's handles at all, since then only a hand-back could end
// the wait, and the caller may be the one who holds them (docs/streams.md, "A cap").
#pragma once

#include <cstddef>
#include <stdexcept>

#include "evpool/detail/depot.h"

namespace evpool {

/// No cap: Get creates whenever it finds no idle handle.
inline constexpr std::size_t kUncapped = detail::kUnlimitedKept;

/// Get at the cap, with every handle of the device out of the pool (leased, or got and not put
/// back). The pool is unchanged; the Get took nothing.
class PoolCapReached : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace evpool
