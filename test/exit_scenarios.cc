// Processes that end while pools are busy, for test/exit_test.cc, which runs each scenario in its
// own process and expects exit status 0: no crash, no hang, no exception escaping.
// Exit status 77 means "skipped" (a CUDA scenario without a GPU), with the reason on stderr.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "evpool/basic_completion_queue.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/host_backend.h"
#include "support/host_completion_backend.h"

namespace {

using namespace std::chrono_literals;

// Constructed before main, hence before the CUDA runtime initialises: destroyed after the
// runtime's own exit handler has run, while it unloads.
std::vector<evpool::CUDAEvent> events_destroyed_after_runtime_unloads;
evpool::CUDAEventPool *pool_destroyed_after_runtime_unloads = nullptr;

void require_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "needs a GPU: %s\n", evpool::describe_cuda_error(cudaGetLastError()).c_str());
    std::exit(77);
  }
}

// Threads that keep getting and putting until the process dies under them.
template <class Pool>
void start_busy_threads(Pool &pool, int threads) {
  static std::atomic<int> started{0};
  for (int t = 0; t < threads; ++t)
    std::thread([&pool] {
      started.fetch_add(1);
      for (;;) {
        auto event = pool.Get(0);
        pool.Put(std::move(event));
      }
    }).detach();
  while (started.load() < threads) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);
}

int host_pool_with_leases() {
  static evpool::HostBackend backend(2);
  static evpool::BasicHandlePool<evpool::HostBackend> pool(backend);
  static std::vector<evpool::HostBackend::Event> leased;
  for (int i = 0; i < 10; ++i) leased.push_back(pool.Get(i % 2));
  pool.Put(pool.Get(0));
  std::exit(0);
}

int host_threads_running() {
  // Leaked, as CUDAEventPool::instance() is: running threads may use it until the process ends.
  auto *pool = new evpool::BasicHandlePool<evpool::HostBackend>(evpool::HostBackend(1));
  start_busy_threads(*pool, 8);
  std::exit(0);
}

int cuda_singleton_leases_at_exit() {
  require_gpu();
  auto &pool = evpool::CUDAEventPool::instance();
  for (int i = 0; i < 10; ++i) events_destroyed_after_runtime_unloads.push_back(pool.Get(0));
  static std::vector<evpool::CUDAEvent> destroyed_before_runtime_unloads;
  for (int i = 0; i < 10; ++i) destroyed_before_runtime_unloads.push_back(pool.Get(0));
  pool.Put(pool.Get(0));
  std::exit(0);
}

int cuda_threads_running() {
  require_gpu();
  start_busy_threads(evpool::CUDAEventPool::instance(), 8);
  std::exit(0);
}

int cuda_pool_destroyed_after_runtime_unloads() {
  // Registered before the runtime initialises, so it runs after the runtime's exit handler.
  std::atexit([] {
    delete pool_destroyed_after_runtime_unloads;
    events_destroyed_after_runtime_unloads.clear();
  });
  require_gpu();
  pool_destroyed_after_runtime_unloads = new evpool::CUDAEventPool();
  for (int i = 0; i < 4; ++i)
    events_destroyed_after_runtime_unloads.push_back(pool_destroyed_after_runtime_unloads->Get(0));
  pool_destroyed_after_runtime_unloads->Put(std::move(events_destroyed_after_runtime_unloads.back()));
  events_destroyed_after_runtime_unloads.pop_back();
  std::exit(0);
}

// Requests pending when the process exits, in a queue with static storage: its destructor runs
// their callbacks. The check is an atexit handler registered before the queue is constructed,
// hence run after it is destroyed.
std::atomic<int> callbacks_at_exit{0};
constexpr int kRequestsAtExit = 16;

void expect_every_callback_ran_at_exit() {
  std::atexit([] {
    if (callbacks_at_exit.load() != kRequestsAtExit) {
      std::fprintf(stderr, "%d of %d callbacks ran before exit\n", callbacks_at_exit.load(), kRequestsAtExit);
      _exit(3);
    }
  });
}

int host_completion_queue_with_pending_work() {
  expect_every_callback_ran_at_exit();
  static evpool::HostBackend events(1);
  static evpool::BasicHandlePool<evpool::HostBackend> pool(events);
  // Never destroyed: the thread below may still be returning from complete_all() when the queue's
  // destructor, which waits for that work, has returned and static destruction goes on.
  static auto &stream = *new evpool::test::HostWorkStream;
  static evpool::BasicCompletionQueue<evpool::test::HostCompletionBackend> queue{
      evpool::test::HostCompletionBackend(pool)};
  for (int i = 0; i < kRequestsAtExit; ++i)
    queue.notify(&stream, [](int) { callbacks_at_exit.fetch_add(1); });
  std::thread([] {  // the work completes while the process is exiting
    std::this_thread::sleep_for(50ms);
    stream.complete_all();
  })
      .detach();
  std::exit(0);
}

int host_completion_queue_leaked_with_work_that_never_ends() {
  // Never destroyed: its poller is still backing off when the process ends under it. Static
  // pointers, so that LeakSanitizer counts them as reachable, as a program's would be.
  static auto *events = new evpool::HostBackend(1);
  static auto *pool = new evpool::BasicHandlePool<evpool::HostBackend>(*events);
  static auto *queue = new evpool::BasicCompletionQueue<evpool::test::HostCompletionBackend>(
      evpool::test::HostCompletionBackend(*pool));
  static auto *never_done = new evpool::test::HostWorkStream;  // the poller reads it to the end
  for (int i = 0; i < 4; ++i) queue->notify(never_done, [](int) { std::abort(); });
  std::this_thread::sleep_for(20ms);
  std::exit(0);
}

int cuda_completion_queue_with_pending_work() {
  require_gpu();
  expect_every_callback_ran_at_exit();
  static evpool::CompletionQueue queue;
  static void *buffer = nullptr;
  if (cudaMalloc(&buffer, 64 << 20) != cudaSuccess) return 1;
  for (int i = 0; i < kRequestsAtExit; ++i) {
    cudaMemsetAsync(buffer, i, 64 << 20, nullptr);
    queue.notify(nullptr, [](cudaError_t) { callbacks_at_exit.fetch_add(1); });
  }
  std::exit(0);
}

struct Scenario {
  const char *name;
  int (*run)();
};
constexpr Scenario kScenarios[] = {
    {"host-pool-with-leases", host_pool_with_leases},
    {"host-threads-running", host_threads_running},
    {"cuda-singleton-leases-at-exit", cuda_singleton_leases_at_exit},
    {"cuda-threads-running", cuda_threads_running},
    {"cuda-pool-destroyed-after-runtime-unloads", cuda_pool_destroyed_after_runtime_unloads},
    {"host-completion-queue-with-pending-work", host_completion_queue_with_pending_work},
    {"host-completion-queue-leaked-with-work-that-never-ends", host_completion_queue_leaked_with_work_that_never_ends},
    {"cuda-completion-queue-with-pending-work", cuda_completion_queue_with_pending_work},
};

}  // namespace

int main(int argc, char **argv) {
  if (argc == 2)
    for (const Scenario &scenario : kScenarios)
      if (std::strcmp(argv[1], scenario.name) == 0) return scenario.run();
  std::fprintf(stderr, "usage: %s SCENARIO\nscenarios:", argv[0]);
  for (const Scenario &scenario : kScenarios) std::fprintf(stderr, " %s", scenario.name);
  std::fprintf(stderr, "\n");
  return 2;
}
