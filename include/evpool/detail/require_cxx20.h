// evpool: stops a compilation that is not C++20 or newer with one clear message, before the
// compiler meets the first concept and reports something cryptic ("'concept' does not name a
// type"). Every public header reaches it first, most through export.h (tools/check-headers
// checks that).
#pragma once

// MSVC keeps __cplusplus at 199711L unless /Zc:__cplusplus is given; _MSVC_LANG is the real value.
#if defined(_MSVC_LANG) && _MSVC_LANG < 202002L || !defined(_MSVC_LANG) && __cplusplus < 202002L
#error "evpool needs C++20: compile with -std=c++20 (MSVC: /std:c++20), or set cpp_std=c++20 in Meson's project() default_options"
// GCC and Clang go on after an #error; a missing include is fatal, so the #error above is the
// only message about evpool's code (MSVC already stops at the #error).
#include <evpool_stops_here_because_it_needs_cxx20>
#endif
