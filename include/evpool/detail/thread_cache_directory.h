// evpool: each thread's directory of its caches, found by pool id. Private to the library.
//
// Design rationale
// ----------------
// A thread keeps one cache per pool it uses (thread_cache.h). The directory maps a pool's id to
// the thread's cache for it: ids are never reused, so a pool that is created at the address of a
// destroyed one can never be handed the dead pool's cache (keying by address would).
//
// The fast path is one thread-local compare: the directory remembers the last pool looked up
// (`hint_id`, `hint`). The directory itself is constant-initialised and trivially destructible, so
// reaching it costs no guard and no call (`constinit thread_local`). It is an inline variable with
// default visibility, so an executable reaches it at a constant offset from the thread pointer and
// most shared objects bind to one copy.
//
// Copies in plugins. The loader does not always merge it: Clang emits it weak, a version script
// makes a plugin's copy local, `-fno-gnu-unique` unmerges it; and it merges copies that a plugin
// would keep apart (GCC emits it as a GNU unique symbol, which binds process-wide even across
// plugins loaded with RTLD_LOCAL, each linking its own libevpool.a). Two rules keep every copy
// sound, and tools/check-plugins builds each of these cases:
// - Ids come from `last_pool_id`, an inline variable declared as the directory is, so that the
//   loader merges or separates the two alike: pools whose calls share a directory draw their ids
//   from one counter. (A counter in the library's own source was one per libevpool.a, and two
//   plugins' first pools both got id 1 in one merged directory: the second took the first's
//   events.)
// - Each copy's first cache registers a fork child handler for that copy (add_thread_cache),
//   beside the library's own (see fork() below).
//
// Cleanup at thread exit is the job of a second thread-local object (`ThreadExitFlush`) that is
// constructed only when the thread registers its first cache. When the thread exits, that object
// flushes every cache back to its pool and marks the directory torn down; calls made after that
// (from other thread-local destructors, or during process exit) find `torn_down` and bypass the
// cache, as snmalloc points a dying thread at an always-miss placeholder.
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
// parent's cache through the hint). A plugin's own copy of the directory is cleared by that copy's
// handler, registered with its first cache: a child handler registered before it that calls the
// plugin's pools may still find a parent's cache (docs/fork.md).
#pragma once

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>
#include <vector>

#include "evpool/export.h"

namespace evpool::detail {

/// The last pool id handed out (see "Copies in plugins" above for why it is an inline variable).
/// Relaxed: only uniqueness matters; 2^64 pools are never created.
EVPOOL_API inline constinit std::atomic<std::uint64_t> last_pool_id{0};

/// A new pool id: unique for the process's lifetime (within every directory that can see the
/// pool), never 0. Thread-safe, lock-free.
inline std::uint64_t next_pool_id() noexcept { return last_pool_id.fetch_add(1, std::memory_order_relaxed) + 1; }

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
    std::uint64_t pool_id;
    ThreadCacheLink *cache;
  };
  std::uint64_t hint_id = 0;  // pool ids start at 1: 0 matches nothing
  ThreadCacheLink *hint = nullptr;
  std::vector<Entry> *entries = nullptr;  // allocated with the first cache
  bool torn_down = false;
};

/// The calling thread's directory (see the rationale for how many copies a process may hold).
EVPOOL_API inline constinit thread_local ThreadCacheDirectory this_thread_caches{};

/// In a fork() child, run by the library's child handler in the child's only thread: the hint
/// names a cache of the parent's process.
inline void forget_hint_in_fork_child() noexcept {
  this_thread_caches.hint_id = 0;
  this_thread_caches.hint = nullptr;
}

/// Flushes this thread's caches when it exits (see the rationale above).
struct ThreadExitFlush {
  ~ThreadExitFlush() {
    ThreadCacheDirectory &directory = this_thread_caches;
    directory.torn_down = true;
    directory.hint_id = 0;
    directory.hint = nullptr;
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
    if (directory.hint == entry.cache) directory.hint_id = 0, directory.hint = nullptr;
    entry.cache->drop();
    return true;
  });
  if (found != nullptr) directory.hint_id = pool_id, directory.hint = found;
  return found;
}

/// Adds the calling thread's new cache for `pool_id` and makes it the hint. False if no memory
/// (then nothing changed). Owner thread only.
inline bool add_thread_cache(std::uint64_t pool_id, ThreadCacheLink *cache) noexcept {
  ThreadCacheDirectory &directory = this_thread_caches;
  // Once per copy of this header's objects, before its first hint: a copy that the library's
  // fork handler does not reach (see the rationale) clears its hints in a fork child too.
  static const bool hints_cleared_in_children = pthread_atfork(nullptr, nullptr, &forget_hint_in_fork_child) == 0;
  if (!hints_cleared_in_children) return false;  // no hint without a handler: no cache
  try {
    // Constructed once per thread, the first time it gets here; its destructor runs at exit.
    thread_local ThreadExitFlush flush_at_exit;
    (void)flush_at_exit;
    if (directory.entries == nullptr) directory.entries = new std::vector<ThreadCacheDirectory::Entry>();
    directory.entries->push_back({pool_id, cache});
  } catch (const std::bad_alloc &) {
    return false;
  }
  directory.hint_id = pool_id;
  directory.hint = cache;
  return true;
}

}  // namespace evpool::detail
