// Which sanitizer the test program is built with, for the tests that size their work by it:
// ThreadSanitizer runs a stress test's calls about ten times slower, and what it judges is the
// order of the accesses, which a fraction of the calls exercises as well.
#pragma once

namespace evpool::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
inline constexpr bool kThreadSanitizer = __has_feature(thread_sanitizer);
#else
inline constexpr bool kThreadSanitizer = false;
#endif

}  // namespace evpool::test
