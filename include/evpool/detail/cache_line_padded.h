// evpool: a value alone on its own 128 bytes. Private to the library.
//
// 128, not 64: Intel's adjacent-line prefetcher pulls cache lines in pairs, so two hot words 64
// bytes apart still interfere (folly measured it; see folly/lang/Align.h), and Apple's and some
// Arm cores use 128-byte lines outright.
#pragma once

#include <cstddef>

namespace evpool::detail {

inline constexpr std::size_t kFalseSharingRange = 128;

template <class T>
struct alignas(kFalseSharingRange) CacheLinePadded {
  static_assert(sizeof(T) <= kFalseSharingRange, "pad only values that fit in the range");
  T value;
};

}  // namespace evpool::detail
