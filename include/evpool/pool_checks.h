// evpool: checked mode, which catches misuse of a pool that would otherwise go unnoticed.
//
// Design rationale
// ----------------
// The misuse that hurts most is silent: a handle Put twice (for example a released handle wrapped
// and put back twice) sits in the pool twice, and the next two Gets hand the same handle to two
// streams that then synchronise on each other's work, a wrong result far from its cause. Catching
// it needs a record of every handle the pool holds, which no fast path can afford. So checks are a
// mode: a checked pool keeps no thread caches (every call goes to the depot, where a per-device
// table, behind a mutex, records each handle as idle or outstanding, with a short stack of the Get
// that handed it out), and an unchecked pool pays nothing: its calls never reach the code that
// checks. Turn it on for one pool with Checks::kOn, or for every pool of an unchanged binary with
// the environment variable EVPOOL_CHECKED=1.
//
// What it catches:
//   - a Put (or a lease's end) of a handle that is already idle in the pool, under whichever
//     device the second Put names: refused with DoublePutError, naming both devices and the
//     handle; the pool's idle copy stays, and the
//     caller's duplicate is emptied without destroying the handle (destroying it would destroy
//     the copy the pool holds). A duplicate is caught while its handle is idle: once another Get
//     has handed the handle out again, the duplicate passes for that holder's return, and the
//     holder's own Put is refused instead (a handle alone cannot tell the two apart);
//   - handles still outstanding when the pool's state is destroyed (its last reference gone): each
//     is reported on stderr with the stack of the Get that handed it out; the process-wide pools
//     (instance(), instance_for()) report at exit. Without checks the report gives the counts alone.
//     A stack names each frame's object file and offset, the function where the object exports
//     it, and ends with the addr2line command that prints every frame's function and source line
//     (build with -g for lines);
//   - a Put under a device that contradicts the handle's own stays an error, as without checks;
//     and a bare handle the pool handed out for one device, put under another, is refused with
//     std::invalid_argument (the caller still owns it);
//   - a Put of a handle that another checked pool handed out and has not had back, bare or not:
//     refused with std::invalid_argument naming the handle and the stack of that pool's Get (the
//     caller still owns it); one that another checked pool holds idle is a double Put there
//     (DoublePutError). A bare handle that no checked pool handed out is accepted as from outside.
//     Checked pools ask each other (detail/handle_checker.h): a pool that is not checked cannot
//     answer, and a handle destroyed by its holder instead of put back counts as its pool's until
//     that pool is destroyed.
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <stdexcept>
#include <string>

#include "evpool/export.h"

namespace evpool {

/// Whether a pool checks for misuse (see above).
enum class Checks {
  kDefault,  ///< off, unless the environment variable EVPOOL_CHECKED turns them on
  kOn,       ///< on, whatever the environment says
};

/// A Put of a handle that is already idle in the pool (checked mode only). The caller's handle was
/// emptied without destroying its handle, which the pool holds.
class DoublePutError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {
/// Whether EVPOOL_CHECKED asks for checks: unset, empty or "0" no, "1" yes. Throws
/// std::invalid_argument, naming the value, for anything else.
EVPOOL_API bool checks_requested_by_environment();

/// A stack recorded with backtrace(), one frame a line, each line starting with `indent`: the
/// function where the dynamic symbol table names it, and always the object file and the offset in
/// it. Then, for each object file, the addr2line command that prints the functions and source lines
/// of its frames (names of functions not exported, lines where the object has debug information).
/// Never throws but std::bad_alloc.
EVPOOL_API std::string describe_stack(void *const *frames, int depth, const char *indent);
}  // namespace detail

}  // namespace evpool
