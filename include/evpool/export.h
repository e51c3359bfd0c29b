// evpool: marks what the shared library exports. The library is built with hidden visibility, so
// only declarations marked EVPOOL_API (the public, non-template API) are exported.
#pragma once

#include "evpool/detail/require_cxx20.h"

#if defined(__GNUC__) || defined(__clang__)
#define EVPOOL_API __attribute__((visibility("default")))
#else
#define EVPOOL_API
#endif
