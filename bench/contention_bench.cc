// evpool contention benchmark: evpool against the designs users would pick instead, under the
// access patterns of a GPU scheduler, from 1 thread to twice the hardware threads.
//
// Names are <backend>/<workload>/<variant>/real_time/threads:<n>:
//   backend  host (HostBackend tokens: the pool's own cost) or cuda (real events, GPU runs only)
//   workload pair     each thread gets an event and puts it back
//            burst    each thread gets 8 events, then puts all 8 back (one operation per event)
//            handoff  thread 2k gets events, thread 2k+1 puts them back (a completion thread)
//            spread   thread t works on device t % devices (8 host devices; every visible GPU)
//            sync     get, cudaEventRecord on stream A, cudaStreamWaitEvent on stream B, put
//   variant  evpool, evpool-nobackoff (retries at once), spinlock (the design replaced), mutex, boost, private (no sharing: the limit),
//            none (create and destroy a real event every time; cuda only)
// Throughput is items_per_second: Get+Put pairs per second, all threads together. events_created
// is what the variant created during the run, pre-warming included: its idle memory.
//
// Extra flags, before Google Benchmark's own: --threads=1,2,4 (default: powers of two up to twice
// the hardware threads) and --host_spread_devices=N (default 8).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "competitors/boost_event_pool.h"
#include "competitors/mutex_event_pool.h"
#include "competitors/spinlock_event_pool.h"
#include "support/counting_backend.h"
#include "evpool/basic_event_pool.h"
#include "evpool/cuda_backend.h"
#include "evpool/host_backend.h"
#include "handoff_ring.h"
#include "thread_private_stacks.h"

namespace evpool::bench {
namespace {

using testing_support::CountingBackend;

// ---- Variants: one interface, Get(thread, device) and Put(thread, event, device) ----------------

// What every variant has: the counting backend its pool (or stacks) creates through, whose copies
// share one counter (and a host backend's state), and the means to re-own a handed-off handle.
template <class Backend>
class CountedVariant {
 public:
  using event_type = typename Backend::event_type;
  std::uint64_t created() const { return backend_.created(); }
  event_type adopt(typename Backend::handle_type handle, int device) { return backend_.adopt(handle, device); }

 protected:
  explicit CountedVariant(CountingBackend<Backend> backend) : backend_(std::move(backend)) {}
  CountingBackend<Backend> backend_;
};

// A pool shared by all threads; `Pool` is one of the pool templates over a backend.
template <template <class> class Pool, class Backend>
class SharedPool : public CountedVariant<Backend> {
 public:
  using typename CountedVariant<Backend>::event_type;
  SharedPool(CountingBackend<Backend> backend, int /*threads*/)
      : CountedVariant<Backend>(backend), pool_(backend, Backend::kDefaultFlags) {}
  event_type Get(int /*thread*/, int device) { return pool_.Get(device); }
  void Put(int /*thread*/, event_type &&event, int device) { pool_.Put(std::move(event), device); }

 private:
  Pool<CountingBackend<Backend>> pool_;
};

template <class B> using EvpoolPool = BasicEventPool<B>;
template <class B> using EvpoolNoBackoffPool = BasicEventPool<B, NoBackoffPolicy<>>;
template <class B> using SharedEvpool = SharedPool<EvpoolPool, B>;
template <class B> using SharedEvpoolNoBackoff = SharedPool<EvpoolNoBackoffPool, B>;
template <class B> using SharedSpinlock = SharedPool<competitors::SpinlockEventPool, B>;
template <class B> using SharedMutex = SharedPool<competitors::MutexEventPool, B>;
template <class B> using SharedBoost = SharedPool<competitors::BoostLockfreeEventPool, B>;

template <class Backend>
class PrivateStacks : public CountedVariant<Backend> {
 public:
  using typename CountedVariant<Backend>::event_type;
  PrivateStacks(CountingBackend<Backend> backend, int threads)
      : CountedVariant<Backend>(backend), stacks_(backend, Backend::kDefaultFlags, threads) {}
  event_type Get(int thread, int device) { return stacks_.Get(thread, device); }
  void Put(int thread, event_type &&event, int device) { stacks_.Put(thread, std::move(event), device); }

 private:
  ThreadPrivateStacks<CountingBackend<Backend>> stacks_;
};

// No pool: every Get creates an event and every Put destroys it.
template <class Backend>
class NoPool : public CountedVariant<Backend> {
 public:
  using typename CountedVariant<Backend>::event_type;
  NoPool(CountingBackend<Backend> backend, int /*threads*/) : CountedVariant<Backend>(backend) {}
  event_type Get(int /*thread*/, int device) {
    return this->backend_.adopt(this->backend_.create(Backend::kDefaultFlags, device), device);
  }
  void Put(int /*thread*/, event_type &&event, int /*device*/) { this->backend_.destroy(event.release()); }
};

// ---- Backends ---------------------------------------------------------------------------------

struct HostBackendFactory {
  static constexpr const char *kName = "host";
  static constexpr bool kGpu = false;
  using Backend = HostBackend;
  static inline int spread_devices = 8;
  static HostBackend make(bool spread) { return HostBackend(spread ? spread_devices : 1); }
  static void enter_device(int) {}
};

struct CudaBackendFactory {
  static constexpr const char *kName = "cuda";
  static constexpr bool kGpu = true;
  using Backend = CUDABackend;
  static CUDABackend make(bool) { return CUDABackend{}; }
  static void enter_device(int device) { cudaSetDevice(device); }
};

// ---- Workloads --------------------------------------------------------------------------------

enum class Workload { kPair, kBurst, kHandoff, kSpread, kSync };

constexpr const char *workload_name(Workload workload) {
  switch (workload) {
    case Workload::kPair: return "pair";
    case Workload::kBurst: return "burst";
    case Workload::kHandoff: return "handoff";
    case Workload::kSpread: return "spread";
    case Workload::kSync: return "sync";
  }
  return "?";
}

constexpr int kBurstSize = 8;
constexpr std::size_t kRingCapacity = 64;
constexpr int kSyncDrainInterval = 256;  // bound the streams' queues in the sync workload

// One benchmark: a variant over a backend under a workload. Setup and Teardown run on one thread
// around each run; Run runs on every benchmark thread.
template <class Factory, class Variant, Workload kWorkload>
struct Case {
  using Backend = typename Factory::Backend;
  using Handle = typename Backend::handle_type;

  struct Streams {
    cudaStream_t a = nullptr, b = nullptr;
  };

  static inline std::unique_ptr<Variant> variant;
  static inline std::unique_ptr<HandoffRing<Handle, kRingCapacity>[]> rings;
  static inline std::vector<Streams> streams;
  static inline int devices = 1;

  static int device_of_thread(int thread) {
    return kWorkload == Workload::kSpread ? thread % devices : 0;
  }

  static int events_held_per_thread() {
    switch (kWorkload) {
      case Workload::kBurst: return kBurstSize;
      case Workload::kHandoff: return static_cast<int>(kRingCapacity) + 1;
      default: return 1;
    }
  }

  static void Setup(const benchmark::State &state) {
    const int threads = state.threads();
    Backend backend = Factory::make(kWorkload == Workload::kSpread);
    devices = backend.device_count();
    variant = std::make_unique<Variant>(CountingBackend<Backend>(backend), threads);
    if constexpr (kWorkload == Workload::kHandoff)
      rings = std::make_unique<HandoffRing<Handle, kRingCapacity>[]>(static_cast<std::size_t>(threads / 2));
    if constexpr (kWorkload == Workload::kSync) {
      streams.assign(static_cast<std::size_t>(threads), Streams{});
      for (int t = 0; t < threads; ++t) {
        Factory::enter_device(device_of_thread(t));
        cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(t)].a, cudaStreamNonBlocking);
        cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(t)].b, cudaStreamNonBlocking);
      }
    }
    prewarm(threads);
  }

  // Fills the pool with what the workload holds at most, so that the run measures reuse.
  static void prewarm(int threads) {
    std::vector<std::pair<int, typename Backend::event_type>> got;
    for (int t = 0; t < threads; ++t)
      for (int i = 0; i < events_held_per_thread(); ++i)
        got.emplace_back(t, variant->Get(t, device_of_thread(t)));
    for (auto &[thread, event] : got) variant->Put(thread, std::move(event), device_of_thread(thread));
  }

  static void Teardown(const benchmark::State &) {
    for (Streams &pair : streams) {
      cudaStreamSynchronize(pair.a);
      cudaStreamSynchronize(pair.b);
      cudaStreamDestroy(pair.a);
      cudaStreamDestroy(pair.b);
    }
    streams.clear();
    rings.reset();
    variant.reset();
  }

  static void Run(benchmark::State &state) {
    const int thread = state.thread_index();
    const int device = device_of_thread(thread);
    Factory::enter_device(device);
    std::int64_t items = 0;
    if constexpr (kWorkload == Workload::kPair || kWorkload == Workload::kSpread) {
      for (auto _ : state) {
        auto event = variant->Get(thread, device);
        benchmark::DoNotOptimize(event);
        variant->Put(thread, std::move(event), device);
      }
      items = state.iterations();
    } else if constexpr (kWorkload == Workload::kBurst) {
      std::vector<typename Backend::event_type> held(kBurstSize);
      for (auto _ : state) {
        for (auto &event : held) event = variant->Get(thread, device);
        for (auto &event : held) variant->Put(thread, std::move(event), device);
      }
      items = state.iterations() * kBurstSize;
    } else if constexpr (kWorkload == Workload::kHandoff) {
      auto &ring = rings[static_cast<std::size_t>(thread / 2)];
      if (thread % 2 == 0) {
        for (auto _ : state) ring.push(variant->Get(thread, device).release());
      } else {
        for (auto _ : state) variant->Put(thread, variant->adopt(ring.pop(), device), device);
        items = state.iterations();  // one operation per event, counted where it completes
      }
    } else if constexpr (kWorkload == Workload::kSync) {
      const Streams &pair = streams[static_cast<std::size_t>(thread)];
      std::int64_t since_drain = 0;
      for (auto _ : state) {
        auto event = variant->Get(thread, device);
        cudaEventRecord(event.get(), pair.a);
        cudaStreamWaitEvent(pair.b, event.get(), 0);
        variant->Put(thread, std::move(event), device);
        if (++since_drain == kSyncDrainInterval) {
          cudaStreamSynchronize(pair.b);
          since_drain = 0;
        }
      }
      items = state.iterations();
    }
    state.SetItemsProcessed(items);
    if (thread == 0)
      state.counters["events_created"] = static_cast<double>(variant->created());
  }
};

// ---- Registration -----------------------------------------------------------------------------

struct Options {
  std::vector<int> threads;
};

template <class Factory, template <class> class Variant, Workload kWorkload>
void register_case(const char *variant_name, const Options &options) {
  using C = Case<Factory, Variant<typename Factory::Backend>, kWorkload>;
  const std::string name = std::string(Factory::kName) + "/" + workload_name(kWorkload) + "/" + variant_name;
  auto *benchmark = benchmark::RegisterBenchmark(name.c_str(), &C::Run);
  benchmark->Setup(&C::Setup)->Teardown(&C::Teardown)->UseRealTime();
  for (int threads : options.threads)
    if (kWorkload != Workload::kHandoff || (threads >= 2 && threads % 2 == 0)) benchmark->Threads(threads);
}

template <class Factory, Workload kWorkload>
void register_workload(const Options &options, bool with_none, bool with_private) {
  register_case<Factory, SharedEvpool, kWorkload>("evpool", options);
  register_case<Factory, SharedEvpoolNoBackoff, kWorkload>("evpool-nobackoff", options);
  register_case<Factory, SharedSpinlock, kWorkload>("spinlock", options);
  register_case<Factory, SharedMutex, kWorkload>("mutex", options);
  register_case<Factory, SharedBoost, kWorkload>("boost", options);
  if (with_private) register_case<Factory, PrivateStacks, kWorkload>("private", options);
  if constexpr (Factory::kGpu)
    if (with_none) register_case<Factory, NoPool, kWorkload>("none", options);
}

template <class Factory>
void register_all(const Options &options) {
  constexpr bool gpu = Factory::kGpu;
  // Thread-private stacks cannot return an event to another thread: handoff does not apply.
  register_workload<Factory, Workload::kPair>(options, gpu, true);
  register_workload<Factory, Workload::kBurst>(options, gpu, true);
  register_workload<Factory, Workload::kHandoff>(options, gpu, false);
  register_workload<Factory, Workload::kSpread>(options, gpu, true);
  if constexpr (gpu) register_workload<Factory, Workload::kSync>(options, gpu, true);
}

std::vector<int> default_thread_counts() {
  const int limit = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> counts;
  for (int n = 1; n <= limit; n *= 2) counts.push_back(n);
  if (counts.back() != limit) counts.push_back(limit);
  return counts;
}

std::vector<int> parse_thread_counts(const char *list) {
  std::vector<int> counts;
  for (const char *p = list; *p;) {
    char *end = nullptr;
    const long n = std::strtol(p, &end, 10);
    if (end == p || n < 1 || n > 4096) {
      std::fprintf(stderr, "contention_bench: bad --threads list '%s'\n", list);
      std::exit(2);
    }
    counts.push_back(static_cast<int>(n));
    p = *end == ',' ? end + 1 : end;
  }
  return counts;
}

}  // namespace
}  // namespace evpool::bench

int main(int argc, char **argv) {
  using namespace evpool::bench;
  Options options{default_thread_counts()};
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      options.threads = parse_thread_counts(argv[i] + 10);
    else if (std::strncmp(argv[i], "--host_spread_devices=", 22) == 0)
      HostBackendFactory::spread_devices = std::atoi(argv[i] + 22);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;

  int gpus = 0;
  const bool gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  register_all<HostBackendFactory>(options);
  if (gpu) {
    cudaDeviceProp properties{};
    cudaGetDeviceProperties(&properties, 0);
    benchmark::AddCustomContext("gpus", std::to_string(gpus) + " x " + properties.name);
    register_all<CudaBackendFactory>(options);
  } else {
    cudaGetLastError();
    benchmark::AddCustomContext("gpus", "none (host backend only)");
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
