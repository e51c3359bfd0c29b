// evpool: what the pool's error messages call a handle. Private.
//
// A backend names its handles with `static constexpr const char *kHandleNoun` ("event",
// "stream"), so that a stream pool's errors speak of streams; a backend that names none (the
// tests' host backends) gets "handle". Optional, and so not part of the HandleBackend concept.
#pragma once

#include <concepts>

namespace evpool::detail {

template <class Backend>
constexpr const char *handle_noun() noexcept {
  if constexpr (requires {
                  { Backend::kHandleNoun } -> std::convertible_to<const char *>;
                })
    return Backend::kHandleNoun;
  else
    return "handle";
}

}  // namespace evpool::detail
