// After fork() a child must neither hand out nor destroy its parent's events: the pool forgets
// them at the child's first operation and starts empty, while the parent keeps its own.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_event_pool.h"
#include "evpool/host_backend.h"

namespace evpool {
namespace {

using Pool = BasicEventPool<HostBackend>;

// Runs `child` in a fork() child and returns its exit status (the child's bit mask of failures).
template <class Child>
int in_child(Child child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void fill(Pool &pool, int device, int count) {
  std::vector<HostBackend::Event> events;
  for (int i = 0; i < count; ++i) events.push_back(pool.Get(device));
  for (auto &event : events) pool.Put(std::move(event));
}

TEST(PoolAfterFork, TheChildStartsEmptyAndNeverDestroysItsParentsEvents) {
  HostBackend backend(2);
  Pool pool(backend);
  fill(pool, 0, 3);
  fill(pool, 1, 2);
  const std::uint64_t created = backend.created(), destroyed = backend.destroyed();

  const int failures = in_child([&] {
    int bits = 0;
    HostBackend::Event event = pool.Get(0);
    if (backend.created() != created + 1) bits |= 1;              // a miss: the pool is empty
    if (HostBackend::serial_of(event.get()) <= created) bits |= 2;  // a fresh token
    pool.Put(std::move(event));
    pool.Purge();
    if (backend.destroyed() != destroyed + 1) bits |= 4;  // only the child's own event
    return bits;
  });
  EXPECT_EQ(failures, 0) << "bit 1: the child reused a parent event; 2: its token was not fresh; "
                            "4: the child destroyed parent events";

  // The parent's pool is untouched: its idle events are still there.
  HostBackend::Event event = pool.Get(0);
  EXPECT_LE(HostBackend::serial_of(event.get()), created);
  EXPECT_EQ(backend.created(), created);
}

TEST(PoolAfterFork, ManyThreadsOfTheChildForgetTheParentsEventsExactlyOnce) {
  HostBackend backend(1);
  Pool pool(backend);
  fill(pool, 0, 16);
  const std::uint64_t created = backend.created();

  const int failures = in_child([&] {
    std::atomic<int> reused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 100; ++i) {
          HostBackend::Event event = pool.Get(0);
          if (HostBackend::serial_of(event.get()) <= created) ++reused;
          pool.Put(std::move(event));
        }
      });
    for (auto &thread : threads) thread.join();
    return reused.load() == 0 ? 0 : 1;
  });
  EXPECT_EQ(failures, 0) << "a thread of the child got a parent event";
}

TEST(PoolAfterFork, AGrandchildForgetsItsParentsEventsToo) {
  HostBackend backend(1);
  Pool pool(backend);
  fill(pool, 0, 2);
  const int failures = in_child([&] {
    fill(pool, 0, 2);  // the child's own events
    const std::uint64_t child_created = backend.created();
    return in_child([&] {
      HostBackend::Event event = pool.Get(0);
      return HostBackend::serial_of(event.get()) > child_created ? 0 : 1;
    });
  });
  EXPECT_EQ(failures, 0) << "the grandchild got an event of its parent";
}

}  // namespace
}  // namespace evpool
