// evpool: marks what the shared library exports. The library is built with hidden visibility, so
// only declarations marked EVPOOL_API (the public, non-template API) are exported.
#pragma once

#include "evpool/detail/require_cxx20.h"

#if defined(__GNUC__) || defined(__clang__)
#define EVPOOL_API __attribute__((visibility("default")))
// One copy per shared object, never merged with another's: for inline functions whose static or
// thread_local objects must belong to the object that uses them (detail/thread_cache_directory.h).
#define EVPOOL_PER_SHARED_OBJECT __attribute__((visibility("hidden")))
#else
#define EVPOOL_API
#define EVPOOL_PER_SHARED_OBJECT
#endif
