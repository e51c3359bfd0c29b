// evpool: the one check of a device ordinal, shared by the pool and the host backend. Private to
// the library.
#pragma once

#include <stdexcept>
#include <string>

namespace evpool::detail {

/// Throws std::out_of_range naming `operation`, the ordinal and the valid range, unless
/// 0 <= device < device_count.
inline void check_device_ordinal(int device, int device_count, const char *operation) {
  if (device < 0 || device >= device_count)
    throw std::out_of_range("evpool: " + std::string(operation) + ": device ordinal " +
                            std::to_string(device) + " is out of range [0, " +
                            std::to_string(device_count) + ")");
}

}  // namespace evpool::detail
