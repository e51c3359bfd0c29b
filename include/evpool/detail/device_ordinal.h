// evpool: the one check of a device ordinal, shared by the pool and the host backend. Private to
// the library.
#pragma once

#include <stdexcept>
#include <string>

namespace evpool::detail {

/// Throws std::out_of_range naming `operation`, the ordinal and the valid range.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_device_out_of_range(int device, int device_count,
                                                                             const char *operation) {
  throw std::out_of_range("evpool: " + std::string(operation) + ": device ordinal " + std::to_string(device) +
                          " is out of range [0, " + std::to_string(device_count) + ")");
}

/// Throws as above unless 0 <= device < device_count. On every Get and Put: the comparison is
/// inlined, the message built only when thrown.
inline void check_device_ordinal(int device, int device_count, const char *operation) {
  if (static_cast<unsigned>(device) >= static_cast<unsigned>(device_count)) [[unlikely]]
    throw_device_out_of_range(device, device_count, operation);
}

}  // namespace evpool::detail
