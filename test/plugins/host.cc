// The host program of tools/check-plugins: loads plugins (plugin.cc) with dlopen(RTLD_LOCAL) and
// checks that each pool keeps to its own events. Prints "works" and exits 0, or says what went
// wrong and exits 1.
//   host two PLUGIN_A PLUGIN_B   two plugins, each with its own pool, called by one thread: the
//                                second pool's first Get must create an event, not take the
//                                first pool's from the thread's cache
//   host fork PLUGIN             a warm cache, then fork(): the child's first Get must create an
//                                event, never hand out its parent's
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

struct Plugin {
  std::uint64_t (*get_and_put)();
  std::uint64_t (*events_created)();
};

bool load(const char *path, Plugin &plugin) {
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("cannot load %s: %s\n", path, dlerror());
    return false;
  }
  plugin.get_and_put = reinterpret_cast<std::uint64_t (*)()>(dlsym(handle, "plugin_get_and_put"));
  plugin.events_created = reinterpret_cast<std::uint64_t (*)()>(dlsym(handle, "plugin_events_created"));
  if (plugin.get_and_put == nullptr || plugin.events_created == nullptr) {
    std::printf("%s lacks the plugin interface\n", path);
    return false;
  }
  return true;
}

bool two_pools(const char *path_a, const char *path_b) {
  Plugin a{}, b{};
  if (!load(path_a, a) || !load(path_b, b)) return false;
  a.get_and_put();
  b.get_and_put();
  const std::uint64_t created_a = a.events_created(), created_b = b.events_created();
  if (created_a != 1 || created_b != 1) {
    std::printf("each pool should have created its one event; created: %llu and %llu\n",
                static_cast<unsigned long long>(created_a), static_cast<unsigned long long>(created_b));
    return false;
  }
  return true;
}

bool fork_child(const char *path) {
  Plugin plugin{};
  if (!load(path, plugin)) return false;
  const std::uint64_t parents = plugin.get_and_put();
  plugin.get_and_put();  // the event is in this thread's cache, found through its hint
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    const std::uint64_t got = plugin.get_and_put();
    const std::uint64_t created = plugin.events_created();
    if (got == parents || created != 1) {
      std::printf("the child got token %llu (its parent's: %llu), its pool created %llu events, "
                  "not 1\n",
                  static_cast<unsigned long long>(got), static_cast<unsigned long long>(parents),
                  static_cast<unsigned long long>(created));
      std::fflush(stdout);
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) {
    std::printf("fork or waitpid failed\n");
    return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char **argv) {
  bool ok = false;
  if (argc == 4 && std::strcmp(argv[1], "two") == 0)
    ok = two_pools(argv[2], argv[3]);
  else if (argc == 3 && std::strcmp(argv[1], "fork") == 0)
    ok = fork_child(argv[2]);
  else
    std::printf("usage: host two PLUGIN_A PLUGIN_B | host fork PLUGIN\n");
  if (ok) std::printf("works\n");
  return ok ? 0 : 1;
}
