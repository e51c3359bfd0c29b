// The host program of tools/check-plugins: loads plugins (plugin.cc) with dlopen(RTLD_LOCAL) and
// checks that each pool keeps to its own events. Built bare, and with EVPOOL_HOST_POOL, linked to
// evpool and using a pool of its own before it loads any plugin (as a scheduler that has plugins
// does). Prints "works" and exits 0, or says what went wrong and exits 1 (a crash fails too).
//   host two PLUGIN_A PLUGIN_B    two plugins' pools, called by one thread: each must create its
//                                 own event, not take another pool's from the thread's cache
//   host fork PLUGIN [PLUGIN_B]   warm caches, then fork(): in the child, each pool's first Get
//                                 must create an event, never hand out its parent's
//   host close PLUGIN_A PLUGIN_B  both used, B closed with dlclose(), then A makes a new pool
//                                 (its lookup visits every cache of the thread) and the process
//                                 exits (the thread's exit flush visits them again)
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#ifdef EVPOOL_HOST_POOL
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#endif

namespace {

struct Plugin {
  void *handle;
  std::uint64_t (*get_and_put)();
  std::uint64_t (*events_created)();
  bool (*use_a_new_pool)();
};

bool load(const char *path, Plugin &plugin) {
  plugin.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (plugin.handle == nullptr) {
    std::printf("cannot load %s: %s\n", path, dlerror());
    return false;
  }
  plugin.get_and_put = reinterpret_cast<std::uint64_t (*)()>(dlsym(plugin.handle, "plugin_get_and_put"));
  plugin.events_created = reinterpret_cast<std::uint64_t (*)()>(dlsym(plugin.handle, "plugin_events_created"));
  plugin.use_a_new_pool = reinterpret_cast<bool (*)()>(dlsym(plugin.handle, "plugin_use_a_new_pool"));
  if (plugin.get_and_put == nullptr || plugin.events_created == nullptr || plugin.use_a_new_pool == nullptr) {
    std::printf("%s lacks the plugin interface\n", path);
    return false;
  }
  return true;
}

#ifdef EVPOOL_HOST_POOL
evpool::BasicHandlePool<evpool::HostBackend> &own_pool() {
  static evpool::BasicHandlePool<evpool::HostBackend> pool{evpool::HostBackend(1)};
  return pool;
}
std::uint64_t own_get_and_put() {
  auto event = own_pool().Get(0);
  const std::uint64_t token = event.get();
  own_pool().Put(std::move(event), 0);
  return token;
}
std::uint64_t own_events_created() { return own_pool().stats().total().created; }
#endif

bool two_pools(const char *path_a, const char *path_b) {
  Plugin a{}, b{};
  if (!load(path_a, a) || !load(path_b, b)) return false;
  a.get_and_put();
  b.get_and_put();
  const std::uint64_t created_a = a.events_created(), created_b = b.events_created();
  if (created_a != 1 || created_b != 1) {
    std::printf("each plugin's pool should have created its one event; created: %llu and %llu\n",
                static_cast<unsigned long long>(created_a), static_cast<unsigned long long>(created_b));
    return false;
  }
#ifdef EVPOOL_HOST_POOL
  own_get_and_put();
  if (own_events_created() != 1) {
    std::printf("the host's pool should have created its one event; created %llu\n",
                static_cast<unsigned long long>(own_events_created()));
    return false;
  }
#endif
  return true;
}

bool fork_child(const char *const *paths, int count) {
  Plugin plugins[2]{};
  std::uint64_t parents[2]{};
  for (int i = 0; i < count; ++i) {
    if (!load(paths[i], plugins[i])) return false;
    parents[i] = plugins[i].get_and_put();
    plugins[i].get_and_put();  // the event is in this thread's cache, found through its hint
  }
#ifdef EVPOOL_HOST_POOL
  const std::uint64_t own_parents = own_get_and_put();
#endif
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    bool ok = true;
    for (int i = 0; i < count; ++i) {
      const std::uint64_t got = plugins[i].get_and_put();
      const std::uint64_t created = plugins[i].events_created();
      if (got == parents[i] || created != 1) {
        std::printf("in the child, %s's pool gave token %llu (its parent's: %llu) and created %llu events, "
                    "not 1; ",
                    paths[i], static_cast<unsigned long long>(got),
                    static_cast<unsigned long long>(parents[i]), static_cast<unsigned long long>(created));
        ok = false;
      }
    }
#ifdef EVPOOL_HOST_POOL
    const std::uint64_t got = own_get_and_put();
    if (got == own_parents || own_events_created() != 1) {
      std::printf("in the child, the host's pool gave token %llu (its parent's: %llu) and created %llu events, "
                  "not 1",
                  static_cast<unsigned long long>(got), static_cast<unsigned long long>(own_parents),
                  static_cast<unsigned long long>(own_events_created()));
      ok = false;
    }
#endif
    std::fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) {
    std::printf("fork or waitpid failed\n");
    return false;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (WIFSIGNALED(status)) std::printf("the child died of signal %d\n", WTERMSIG(status));
  return false;
}

bool close_one(const char *path_a, const char *path_b) {
  Plugin a{}, b{};
  if (!load(path_a, a) || !load(path_b, b)) return false;
  a.get_and_put();
  b.get_and_put();
#ifdef EVPOOL_HOST_POOL
  own_get_and_put();
#endif
  if (dlclose(b.handle) != 0) {
    std::printf("dlclose failed: %s\n", dlerror());
    return false;
  }
  if (!a.use_a_new_pool()) {
    std::printf("a new pool of the remaining plugin did not create its own event\n");
    return false;
  }
  return a.get_and_put() != 0;
}

}  // namespace

int main(int argc, char **argv) {
  bool ok = false;
  if (argc == 4 && std::strcmp(argv[1], "two") == 0)
    ok = two_pools(argv[2], argv[3]);
  else if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "fork") == 0)
    ok = fork_child(argv + 2, argc - 2);
  else if (argc == 4 && std::strcmp(argv[1], "close") == 0)
    ok = close_one(argv[2], argv[3]);
  else
    std::printf("usage: host two|close PLUGIN_A PLUGIN_B | host fork PLUGIN [PLUGIN_B]\n");
  if (ok) std::printf("works\n");
  std::fflush(stdout);
  return ok ? 0 : 1;
}
