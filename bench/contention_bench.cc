// evpool contention benchmark: evpool against the designs users would pick instead, under the
// access patterns of a GPU scheduler, from 1 thread to twice the hardware threads.
//
// Names are <backend>/<workload>/<variant>/real_time/threads:<n>:
//   backend   host (HostBackend tokens: the pools' own cost) or cuda (real events; GPU hosts only)
//   workload  one of the table in workloads.h: what each thread does, where it runs, which
//             variants apply and what the reports compare with. lease, lease-shared and
//             lease-handoff apply to the evpool variants only: the other designs have no leases.
//   variant   one of the list in variants.h: evpool under its policies, the competitors, and the
//             references private (thread-private stacks) and, in handoff, carrier (no pool).
// `--list` prints both tables as JSON, the same JSON the runs carry in their context as
// "catalogue"; tools/bench and tools/bench_results.py read them from there and keep no list.
//
// Throughput is items_per_second: events got and put back per second, all threads together (a
// lease counts as one). events_created is what the variant created during the run, pre-warming
// included: its idle memory (none's, created and destroyed every time, is no memory; wait's
// evpool reports its pool's node_count(), see LibraryPool in variants.h).
//
// Extra flags, before Google Benchmark's own: --list (with "gpus": the visible GPUs, or why there
// are none), --threads=1,2,4 (default: powers of two up
// to twice the hardware threads), --host_spread_devices=N (default 8) and --thread_warmup=0 (no
// warm-up of each thread's source before its timed loop; see Case::warm_up).
//
// wall_items_per_second is the same events over the wall-clock span of the timed loops, where
// items_per_second divides by the mean of the threads' own intervals (Google Benchmark's way):
// with more threads than cores the two part when the threads run staggered (see Case::Run).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "contention_case.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/host_backend.h"
#include "variants.h"
#include "workloads.h"

namespace evpool::bench {
namespace {

// ---- Backends ---------------------------------------------------------------------------------

enum class BackendKind { kHost, kCuda };
constexpr std::string_view kBackendNames[] = {"host", "cuda"};

struct HostBackendFactory {
  static constexpr BackendKind kKind = BackendKind::kHost;
  using Backend = HostBackend;
  static inline int spread_devices = 8;
  static HostBackend make(Placement placement) {
    return HostBackend(placement == Placement::kRoundRobin ? spread_devices : 1);
  }
  static void enter_device(int) {}
};

struct CudaBackendFactory {
  static constexpr BackendKind kKind = BackendKind::kCuda;
  using Backend = CUDAEventBackend;
  static CUDAEventBackend make(Placement) { return CUDAEventBackend{}; }
  static void enter_device(int device) { cudaSetDevice(device); }
};

// ---- Which benchmarks exist -------------------------------------------------------------------

constexpr bool applies(BackendKind backend, const WorkloadInfo &workload, VariantKind variant) {
  if (backend == BackendKind::kHost && workload.backends == Backends::kCudaOnly) return false;
  // Creating a host token costs next to nothing: `none` says something about real events only.
  if (backend == BackendKind::kHost && variant == kNoPool) return false;
  return (workload.variant_kinds & variant) != 0;
}

struct VariantEntry {
  std::string_view name;
  VariantKind kind;
};

std::vector<VariantEntry> variant_entries() {
  std::vector<VariantEntry> entries;
  AllVariants::for_each([&]<class Entry>() { entries.push_back({Entry::kName, Entry::kKind}); });
  return entries;
}

// JSON pieces. Every name is [a-z0-9-]: nothing to escape.
std::string quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }
std::string joined(const std::vector<std::string> &items, const char *open, const char *close) {
  std::string text = open;
  for (std::size_t i = 0; i < items.size(); ++i) text += (i == 0 ? "" : ", ") + items[i];
  return text + close;
}

// The catalogue: {"variants": [...], "workloads": [...], "references": {workload: "w/variant"},
// "benchmarks": {backend: {workload: [variant, ...]}}}, every list in report order.
std::string catalogue_json() {
  const std::vector<VariantEntry> variants = variant_entries();
  std::vector<std::string> variant_names, workload_names, references, backends;
  for (const VariantEntry &variant : variants) variant_names.push_back(quoted(variant.name));
  for (const WorkloadInfo &workload : kWorkloads) {
    workload_names.push_back(quoted(workload.name));
    references.push_back(quoted(workload.name) + ": " + quoted(workload.reference));
  }
  for (BackendKind backend : {BackendKind::kHost, BackendKind::kCuda}) {
    std::vector<std::string> workloads;
    for (const WorkloadInfo &workload : kWorkloads) {
      std::vector<std::string> names;
      for (const VariantEntry &variant : variants)
        if (applies(backend, workload, variant.kind)) names.push_back(quoted(variant.name));
      if (!names.empty()) workloads.push_back(quoted(workload.name) + ": " + joined(names, "[", "]"));
    }
    const std::string_view backend_name = kBackendNames[static_cast<int>(backend)];
    backends.push_back(quoted(backend_name) + ": " + joined(workloads, "{", "}"));
  }
  return joined(
      {"\"variants\": " + joined(variant_names, "[", "]"), "\"workloads\": " + joined(workload_names, "[", "]"),
       "\"references\": " + joined(references, "{", "}"), "\"benchmarks\": " + joined(backends, "{", "}")},
      "{", "}");
}

// The GPUs the CUDA workloads run on ("1 x NVIDIA H200"), or why there are none.
struct VisibleGpus {
  int count = 0;
  std::string description;
};
VisibleGpus visible_gpus() {
  VisibleGpus gpus;
  const cudaError_t status = cudaGetDeviceCount(&gpus.count);
  if (status != cudaSuccess || gpus.count == 0) {
    cudaGetLastError();
    gpus.count = 0;
    gpus.description = std::string("none (") +
                       (status != cudaSuccess
                            ? std::string(cudaGetErrorName(status)) + ": " + evpool::describe_cuda_error(status)
                            : std::string("no device")) +
                       "): host backend only";
    return gpus;
  }
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, 0);
  gpus.description = std::to_string(gpus.count) + " x " + properties.name;
  return gpus;
}

// ---- Registration -----------------------------------------------------------------------------

struct Options {
  std::vector<int> threads;
};

// evpool::wait takes a CUDAEventPool and nothing else: in `wait`, evpool is the library's own pool.
template <class Factory, Workload kWorkload, class Entry>
using VariantType = std::conditional_t<kWorkload == Workload::kWait && Entry::kKind == kEvpool, LibraryPool,
                                       typename Entry::template type<typename Factory::Backend>>;

template <class Factory, Workload kWorkload, class Entry>
void register_case(const Options &options) {
  using C = Case<Factory, VariantType<Factory, kWorkload, Entry>, kWorkload>;
  const std::string name = std::string(kBackendNames[static_cast<int>(Factory::kKind)]) + "/" +
                           std::string(info(kWorkload).name) + "/" + std::string(Entry::kName);
  auto *benchmark = benchmark::RegisterBenchmark(name.c_str(), &C::Run);
  benchmark->Setup(&C::Setup)->Teardown(&C::Teardown)->UseRealTime();
  for (int threads : options.threads)
    if (!C::kInPairs || (threads >= 2 && threads % 2 == 0)) benchmark->Threads(threads);
}

template <class Factory, Workload kWorkload>
void register_workload(const Options &options) {
  AllVariants::for_each([&]<class Entry>() {
    if constexpr (applies(Factory::kKind, info(kWorkload), Entry::kKind))
      register_case<Factory, kWorkload, Entry>(options);
  });
}

template <class Factory>
void register_all(const Options &options) {
  [&]<std::size_t... kIndex>(std::index_sequence<kIndex...>) {
    (register_workload<Factory, static_cast<Workload>(kIndex)>(options), ...);
  }
  (std::make_index_sequence<kWorkloadCount>{});
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
    if (std::strcmp(argv[i], "--list") == 0) {
      // The catalogue, and what tools/bench tells the user before a run: whether a GPU is there.
      std::string listing = catalogue_json();
      listing.insert(1, "\"gpus\": " + quoted(visible_gpus().description) + ", ");
      std::printf("%s\n", listing.c_str());
      return 0;
    }
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      options.threads = parse_thread_counts(argv[i] + 10);
    else if (std::strncmp(argv[i], "--thread_warmup=", 16) == 0)
      thread_warm_up = std::atoi(argv[i] + 16) != 0;
    else if (std::strncmp(argv[i], "--host_spread_devices=", 22) == 0)
      HostBackendFactory::spread_devices = std::atoi(argv[i] + 22);
    else
      argv[kept++] = argv[i];
  }
  argc = kept;

  benchmark::AddCustomContext("catalogue", catalogue_json());
  const VisibleGpus gpus = visible_gpus();
  benchmark::AddCustomContext("gpus", gpus.description);
  register_all<HostBackendFactory>(options);
  if (gpus.count > 0) register_all<CudaBackendFactory>(options);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
