// A completion queue after fork(): the parent's requests are the parent's. The child's first call
// forgets them (their callbacks never run in the child, their events are neither returned nor
// destroyed there), starts a poller thread of its own where the queue had one, and then serves
// the child's requests; the parent's requests complete in the parent, once.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "evpool/basic_completion_queue.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "support/host_completion_backend.h"
#include "support/host_completion_fixture.h"
#include "support/sanitizers.h"

namespace evpool {
namespace {

using test::HostCompletionBackend;
using test::HostWorkStream;
using Queue = BasicCompletionQueue<HostCompletionBackend>;

using test::kThreadSanitizer;

// Runs `child` in a fork() child and returns its exit status (a bit mask of failures).
int run_in_child(const std::function<int()> &child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

class CompletionQueueAfterFork : public test::HostCompletionFixture<testing::TestWithParam<CompletionPolling>> {
 protected:
  void SetUp() override {
    if (kThreadSanitizer && GetParam() == CompletionPolling::kOwnThread)
      GTEST_SKIP() << "ThreadSanitizer cannot start a thread in the child of a multi-threaded process "
                      "(the queue's poller); the other builds run this";
  }
};

TEST_P(CompletionQueueAfterFork, TheChildServesItsOwnRequestsAndNeverItsParents) {
  HostWorkStream parents_stream;
  Queue queue(backend_, CompletionQueueOptions{GetParam()});
  std::atomic<int> parents_calls{0};
  for (int i = 0; i < 4; ++i) queue.notify(&parents_stream, [&](int) { ++parents_calls; });
  const auto wait = [&](Queue::completion &completion) {
    while (!completion.ready())
      if (GetParam() == CompletionPolling::kCaller) queue.poll();
    return completion.status();
  };
  // The poller has filed them in its FIFOs before the fork: the child must forget those too.
  while (queue.stats().requests < 4)
    if (GetParam() == CompletionPolling::kCaller) queue.poll();

  const int failures = run_in_child([&] {
    int failed = 0;
    parents_stream.complete_all();  // the parent's work is done in the child's copy too
    HostWorkStream childs_stream;
    childs_stream.complete_through(1);
    Queue::completion childs = queue.notify(&childs_stream);
    if (wait(childs) != HostCompletionBackend::kSuccess) failed |= 1;
    queue.poll();
    if (parents_calls.load() != 0) failed |= 2;   // a parent's callback ran in the child
    if (backend_.given_back() != 1) failed |= 4;  // a parent's event went back in the child
    if (events_.destroyed() != 0) failed |= 8;    // or was destroyed there
    return failed;
  });
  EXPECT_EQ(failures, 0);

  parents_stream.complete_all();
  Queue::completion last = queue.notify(&parents_stream);
  parents_stream.complete_all();
  EXPECT_EQ(wait(last), HostCompletionBackend::kSuccess);
  EXPECT_EQ(parents_calls.load(), 4);
  EXPECT_EQ(backend_.given_back(), 5u);
}

TEST_P(CompletionQueueAfterFork, AChildsDestructorDoesNotWaitForItsParentsRequests) {
  auto queue = std::make_unique<Queue>(backend_, CompletionQueueOptions{GetParam()});
  HostWorkStream never_done;
  std::atomic<int> calls{0};
  queue->notify(&never_done, [&](int) { ++calls; });
  // In the child the work never completes: a destructor that waited for it would hang the test.
  EXPECT_EQ(run_in_child([&] {
              queue.reset();
              return calls.load() == 0 ? 0 : 1;
            }),
            0);
  never_done.complete_all();
  queue.reset();
  EXPECT_EQ(calls.load(), 1);
}

// fork() while a parent's thread is inside one of the queue's callbacks: its pass holds the
// queue's polling lock, and the thread does not exist in the child. The child's first call must
// not find the queue locked by that pass, which will never end there: the child's request is
// done within seconds. Fails if forgetting leaves the lock as the parent had it.
TEST_P(CompletionQueueAfterFork, AForkDuringAParentsPassLeavesTheChildsQueueUnlocked) {
  HostWorkStream parents_stream;
  Queue queue(backend_, CompletionQueueOptions{GetParam()});
  parents_stream.complete_through(1);
  std::atomic<bool> in_callback{false}, release{false};
  queue.notify(&parents_stream, [&](int) {
    in_callback.store(true);
    while (!release.load()) std::this_thread::yield();
  });
  std::jthread caller;  // kCaller: a thread of the parent polls
  if (GetParam() == CompletionPolling::kCaller) caller = std::jthread([&] { queue.poll(); });
  while (!in_callback.load()) std::this_thread::yield();

  const int failures = run_in_child([&] {
    HostWorkStream childs_stream;
    childs_stream.complete_through(1);
    Queue::completion childs = queue.notify(&childs_stream);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!childs.ready() && std::chrono::steady_clock::now() < deadline)
      if (GetParam() == CompletionPolling::kCaller)
        queue.poll();
      else
        std::this_thread::yield();
    return childs.ready() ? 0 : 1;
  });
  release.store(true);
  EXPECT_EQ(failures, 0) << "the child's request was not done in 5 s: its queue stayed locked by the parent's pass";
}

INSTANTIATE_TEST_SUITE_P(Polling, CompletionQueueAfterFork,
                         testing::Values(CompletionPolling::kOwnThread, CompletionPolling::kCaller),
                         [](const auto &info) {
                           return info.param == CompletionPolling::kOwnThread ? "OwnThread" : "Caller";
                         });

}  // namespace
}  // namespace evpool
