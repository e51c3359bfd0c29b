// evpool: a pool's cap per device.
//
// A pool may be given a cap: the most handles of one device it keeps at once, idle, busy, retired
// or leased. Get creates a handle only below the cap; at the cap it waits, as on a semaphore, for
// a handle to become idle: a busy one whose work completes, or one handed back. The GPU or the
// holders end the wait; a thread that itself holds every handle of the cap and asks for one more
// waits for ever (docs/streams.md, "A cap", says why the pool does not throw instead).
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <cstddef>

#include "evpool/detail/depot.h"

namespace evpool {

/// No cap: Get creates whenever it finds no idle handle.
inline constexpr std::size_t kUncapped = detail::kUnlimitedKept;

}  // namespace evpool
