// evpool: each thread's directory of its caches, found by pool id. Private to the library.
//
// Design rationale
// ----------------
// A thread keeps one cache per pool it uses (thread_cache.h). The directory maps a pool's id to
// the thread's cache for it: ids are never reused, so a pool that is created at the address of a
// destroyed one can never be handed the dead pool's cache (keying by address would).
//
// The fast path is one or two thread-local compares: the directory remembers the last two pools
// looked up (`hints`, the most recent first). Two, because a thread that uses two pools in turn
// is the common case, not the exception: an event pool and a stream pool, or instance() and
// instance_for(cudaEventDefault). With one hint, every call of such a thread missed it and paid
// the slow lookup (the directory's search, and the fork check): on the 2-core machine, host
// backend, 7.9 ns a Get+Put pair against 2.8 on one pool; with two, 2.9 (docs/design.md). A hit
// on the second hint does not swap the two (that would write both on every call of an
// alternating thread); a slow lookup puts its pool first and moves the first hint second, so the
// second hint is the one a new pool evicts, whichever of the two was used last. The directory
// itself is constant-initialised and trivially destructible, so
// reaching it costs no guard and no call (`constinit thread_local`). It is an inline variable with
// default visibility, so an executable reaches it at a constant offset from the thread pointer and
// most shared objects bind to one copy.
//
// Copies in plugins. A process can hold several copies of the directory, and of the code around
// it, and the loader decides which objects bind to which: Clang emits the directory weak, a
// version script makes a plugin's copy local, `-fno-gnu-unique` unmerges it, `-Bsymbolic` makes a
// plugin bind to its own copy first; and GCC emits it as a GNU unique symbol, which binds process
// wide even across plugins loaded with RTLD_LOCAL that each link their own libevpool.a. No
// arrangement of symbols makes every object agree, so nothing here relies on one:
// - Pool ids do not depend on sharing a counter. Each copy of the id source starts at a random
//   point of the 2^64 ids and counts up from there (next_pool_id), so ids from one copy never
//   repeat, and two copies that a directory sees both collide only by chance: when their ranges
//   of ids overlap, with odds of about (pools of one + pools of the other) / 2^64. (A counter in
//   the library's own source, one per libevpool.a, numbered two plugins' first pools 1 and 1 in
//   one merged directory, and the second took the first's events.) The start is random also
//   where getrandom() fails (random_id_start), and test/pool_id_test.cc makes it fail.
// - What must exist once per copy of the directory exists once per shared object instead
//   (EVPOOL_PER_SHARED_OBJECT): add_thread_cache's fork child handler and its thread-exit flush.
//   Each object's handler clears the directory that object binds to, whichever that is, so every
//   copy is cleared in a fork child; and each object that registered a cache for a thread keeps a
//   thread-exit destructor, which keeps it loaded (a dlclose() waits) until that thread exits.
//   (As GNU unique symbols, the once-per-copy guard and flush were merged between plugins that
//   used different directories: a plugin linked with -Bsymbolic registered no handler and its
//   fork child got its parent's events, and a dlclose()d plugin's caches stayed in a directory
//   that nothing kept loaded.)
// tools/check-plugins builds these arrangements and checks both properties. Not supported:
// RTLD_DEEPBIND, which binds a plugin to a fork generation (fork_guard.h) that an executable's
// copy relocation has moved elsewhere, so its pools never learn of a fork.

// Cleanup at thread exit is the job of a second thread-local object (`ThreadExitFlush`) that is
// constructed only when the thread registers its first cache. When the thread exits, that object
// flushes every cache back to its pool and marks the directory torn down; calls made after that
// (from other thread-local destructors, or during process exit) find `torn_down` and bypass the
// cache, as snmalloc points a dying thread at an always-miss placeholder. Where several shared
// objects registered caches in one directory, each has a flush (see "Copies in plugins"): the
// first to run (the last constructed) flushes every cache and marks the directory torn down, and
// the others find nothing to do; a thread-local destructor that runs in between bypasses the
// caches, as after the last.
//
// Caches of pools that have been destroyed ("stale") stay in the directory until the next slow
// lookup or thread exit drops them; they hold no events.
//
// fork(). Only a lookup that has checked whether its pool runs in a fork() child that has not yet
// forgotten its parent's events (fork_guard.h) sets a hint: the pool's slow lookup, which checks
// again once the hint is set (a fork() from a signal handler may come in between), and
// FlushThreadCache. The hint does not survive fork(): the library's pthread_atfork child handler
// (src/fork_generation.cc), the one that starts the child's fork generation, also clears the hint
// of the child's only thread, and threads the child starts later begin with none. So a hit on the
// hint proves that the pool made that check in this process, and Get and Put test nothing for
// fork on a hit. The library's handler does both, so no other child handler can run between the
// two (handlers run in the order they were registered: one registered in between could reach a
// parent's cache through the hint). A copy of the directory that the library's handler does not
// reach is cleared by the handler of each shared object bound to it, registered with that
// object's first cache: a child handler registered before it that calls such a plugin's pools may
// still find a parent's cache (docs/fork.md).
#pragma once

#include <pthread.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

#include "evpool/detail/fork_guard.h"
#include "evpool/export.h"

namespace evpool::detail {

/// Where the copy of the id source whose counter lies at `copy` starts: a random 64-bit number.
/// From the kernel's getrandom(); where that fails (an old kernel, a seccomp profile, early boot),
/// from the random bytes the kernel gave the process at exec (AT_RANDOM) and the clock, which every
/// copy in the process shares. Either is mixed with the counter's own address, which no two copies
/// share, through a bijective 64-bit finaliser (splitmix64's), so that copies set up at the same
/// moment still start far apart.
inline std::uint64_t random_id_start(const void *copy) noexcept {
  std::uint64_t entropy = 0;
  if (getrandom(&entropy, sizeof entropy, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof entropy)) {
    if (const auto at_random = getauxval(AT_RANDOM); at_random != 0)
      std::memcpy(&entropy, reinterpret_cast<const void *>(at_random), sizeof entropy);
    entropy ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::uint64_t x = entropy ^ reinterpret_cast<std::uintptr_t>(copy);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

/// A new pool id, never 0: from this copy of the id source, never one it handed out before; from
/// another copy, the same only by chance (see "Copies in plugins" above). Thread-safe; lock-free
/// after its first call, which draws the random start.
inline std::uint64_t next_pool_id() noexcept {
  static std::atomic<std::uint64_t> last{random_id_start(&last)};
  for (;;) {
    // Relaxed: only uniqueness matters.
    const std::uint64_t id = last.fetch_add(1, std::memory_order_relaxed) + 1;
    if (id != 0) return id;  // 0 is the empty hint's
  }
}

/// What the directory needs of a cache, whatever its pool's type.
class ThreadCacheLink {
 public:
  /// The owner thread is exiting: flush to the pool if it is alive, then let go of the cache.
  virtual void on_thread_exit() noexcept = 0;
  /// The pool was destroyed: the cache is useless to the thread.
  virtual bool stale() const noexcept = 0;
  /// The thread lets go of the cache without flushing (it is stale).
  virtual void drop() noexcept = 0;

 protected:
  ~ThreadCacheLink() = default;
};

struct ThreadCacheDirectory {
  struct Entry {
    std::uint64_t pool_id = 0;  // no pool has id 0: an empty hint matches nothing
    ThreadCacheLink *cache = nullptr;
  };
  static constexpr int kHints = 2;
  Entry hints[kHints] = {};               // the pools looked up last, the most recent first
  std::vector<Entry> *entries = nullptr;  // allocated with the first cache
  bool torn_down = false;

  /// The hinted cache of `pool_id`, or nullptr: the fast path, inlined into Get and Put.
  [[gnu::always_inline]] ThreadCacheLink *hinted(std::uint64_t pool_id) const noexcept {
    if (hints[0].pool_id == pool_id) [[likely]]
      return hints[0].cache;
    if (hints[1].pool_id == pool_id) return hints[1].cache;
    return nullptr;
  }
  /// `cache` of `pool_id` becomes the first hint, the first the second. A fork() from a signal
  /// handler in the middle would leave the child a parent's hint: the child's handler clears
  /// both, and the resumed copy writes the first back as the second, for a pool whose lookup made
  /// no check in the child. The fork generation, read before and after, tells, and the hints
  /// are cleared again (the lookup's own pool is checked after, by hinted_after_fork_check).
  /// test/fork_test.cc forks at each instruction of it in turn (AForkInsideHint...).
  void hint(std::uint64_t pool_id, ThreadCacheLink *cache) noexcept {
    const std::uint32_t generation = fork_generation();
    // A fork in between runs the child's handler on this very thread, as a signal handler runs:
    // what it writes, this thread's later load sees. The signal fences keep the compiler from
    // moving the hints' reads and writes out from between the two loads (relaxed loads order no
    // plain access); they emit no instruction.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (hints[0].pool_id != pool_id) hints[1] = hints[0];
    hints[0] = {pool_id, cache};
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (fork_generation() != generation) [[unlikely]]
      forget_hints();
  }
  /// A hint that names `cache` is dropped.
  void forget_hint_of(const ThreadCacheLink *cache) noexcept {
    for (Entry &hinted_entry : hints)
      if (hinted_entry.cache == cache) hinted_entry = {};
  }
  void forget_hints() noexcept {
    for (Entry &hinted_entry : hints) hinted_entry = {};
  }
};
static_assert(ThreadCacheDirectory::kHints == 2, "hinted() compares each hint by name");
static_assert(std::is_trivially_destructible_v<ThreadCacheDirectory>,
              "reaching a constinit thread_local of a trivially destructible type costs no guard");

/// The calling thread's directory (see the rationale for how many copies a process may hold).
EVPOOL_API inline constinit thread_local ThreadCacheDirectory this_thread_caches{};

/// In a fork() child, run by the library's child handler in the child's only thread: the hint
/// names a cache of the parent's process.
EVPOOL_PER_SHARED_OBJECT inline void forget_hint_in_fork_child() noexcept {
  this_thread_caches.forget_hints();
}

/// Flushes this thread's caches when it exits (see the rationale above).
struct ThreadExitFlush {
  ~ThreadExitFlush() {
    ThreadCacheDirectory &directory = this_thread_caches;
    directory.torn_down = true;
    directory.forget_hints();
    if (directory.entries == nullptr) return;
    for (const auto &entry : *directory.entries) entry.cache->on_thread_exit();
    delete directory.entries;
    directory.entries = nullptr;
  }
};

/// The calling thread's cache for `pool_id`, or nullptr; drops stale caches on the way. Sets the
/// hint when found. Owner thread only.
inline ThreadCacheLink *find_thread_cache(std::uint64_t pool_id) noexcept {
  ThreadCacheDirectory &directory = this_thread_caches;
  if (directory.entries == nullptr) return nullptr;
  auto &entries = *directory.entries;
  ThreadCacheLink *found = nullptr;
  std::erase_if(entries, [&](const ThreadCacheDirectory::Entry &entry) {
    if (entry.pool_id == pool_id) {
      found = entry.cache;
      return false;
    }
    if (!entry.cache->stale()) return false;
    directory.forget_hint_of(entry.cache);
    entry.cache->drop();
    return true;
  });
  if (found != nullptr) directory.hint(pool_id, found);
  return found;
}

/// Adds the calling thread's new cache for `pool_id` and makes it the hint. False if no memory
/// (then nothing changed). Owner thread only.
EVPOOL_PER_SHARED_OBJECT inline bool add_thread_cache(std::uint64_t pool_id, ThreadCacheLink *cache) noexcept {
  ThreadCacheDirectory &directory = this_thread_caches;
  // Once per shared object, before its first hint: whichever copy of the directory this object
  // binds to is cleared in a fork child, also one that the library's handler does not reach (see
  // "Copies in plugins" above).
  static const bool hints_cleared_in_children = pthread_atfork(nullptr, nullptr, &forget_hint_in_fork_child) == 0;
  if (!hints_cleared_in_children) return false;  // no hint without a handler: no cache
  try {
    // Constructed once per thread and shared object, the first time it gets here; its destructor
    // runs at exit, and keeps this object loaded until then.
    thread_local ThreadExitFlush flush_at_exit;
    (void)flush_at_exit;
    if (directory.entries == nullptr) directory.entries = new std::vector<ThreadCacheDirectory::Entry>();
    directory.entries->push_back({pool_id, cache});
  } catch (const std::bad_alloc &) {
    return false;
  }
  directory.hint(pool_id, cache);
  return true;
}

}  // namespace evpool::detail
