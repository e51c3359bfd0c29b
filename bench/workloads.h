// evpool bench: the workloads of the contention benchmark, in one table: what each thread does,
// which variants it applies to, where its threads run and what its throughput is compared with.
// The benchmark registers from this table and prints it with --list; tools/bench and
// tools/bench_results.py read it from there, so it is the only list of workloads.
#pragma once

#include <cstddef>
#include <string_view>

namespace evpool::bench {

enum class Workload {
  kPair,
  kBurst,
  kBurst64,
  kHandoff,
  kSpread,
  kSync,
  kSchedule,
  kGraph,
  kWait,
  kLease,
  kLeaseShared,
  kLeaseHandoff
};
inline constexpr std::size_t kWorkloadCount = 12;

/// Steps a graph launch replays: enough to spread its cost; their 64 events fit the private stacks.
inline constexpr int kGraphSteps = 32;

/// Kinds of variant (bench/variants.h), as bits: a workload applies to some kinds.
enum VariantKind : unsigned {
  kEvpool = 1u << 0,           // the library, default policy
  kEvpoolPolicies = 1u << 1,   // the library under other policies
  kCompetitorPools = 1u << 2,  // the pools users would pick instead (bench/competitors/)
  kPrivateStacks = 1u << 3,    // thread-private stacks: the limit for one thread's own events
  kNoPool = 1u << 4,           // create and destroy every time (real events only)
  kCarrier = 1u << 5,          // handoff's ring alone: the limit for events that change threads
};
inline constexpr unsigned kEvpoolFamily = kEvpool | kEvpoolPolicies;
inline constexpr unsigned kEveryPool = kEvpoolFamily | kCompetitorPools | kPrivateStacks | kNoPool;

enum class Backends { kHostAndCuda, kCudaOnly };

/// Where thread t runs. Round robin puts thread t on device t % devices: every visible GPU on the
/// cuda backend, and --host_spread_devices host devices (8 by default) on the host backend.
enum class Placement { kDeviceZero, kRoundRobin };

struct WorkloadInfo {
  Workload workload;
  std::string_view name;
  unsigned variant_kinds;
  /// The point throughput is divided by in the reports, as "workload/variant" at the same thread
  /// count: the limit for this access pattern.
  std::string_view reference;
  Backends backends;
  Placement placement;
  /// Events one iteration gets and puts (leases count one each); throughput is counted in them.
  int events_per_iteration;
};

// In enum order. Each thread, on every iteration:
inline constexpr WorkloadInfo kWorkloads[kWorkloadCount] = {
    // gets one event and puts it back
    {.workload = Workload::kPair,
     .name = "pair",
     .variant_kinds = kEveryPool,
     .reference = "pair/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 1},
    // gets 8 events, then puts the 8 back
    {.workload = Workload::kBurst,
     .name = "burst",
     .variant_kinds = kEveryPool,
     .reference = "burst/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 8},
    // gets 64 events, then puts the 64 back
    {.workload = Workload::kBurst64,
     .name = "burst64",
     .variant_kinds = kEveryPool,
     .reference = "burst64/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 64},
    // threads in pairs: thread 2k gets a batch of 64 events and passes it through a BatchRing to
    // thread 2k+1, which puts them back (a completion thread); counted where they are put back.
    // Private stacks cannot return an event to another thread: carrier is the limit here.
    {.workload = Workload::kHandoff,
     .name = "handoff",
     .variant_kinds = kEvpoolFamily | kCompetitorPools | kNoPool | kCarrier,
     .reference = "handoff/carrier",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 64},
    // pair, with thread t on device t % devices
    {.workload = Workload::kSpread,
     .name = "spread",
     .variant_kinds = kEveryPool,
     .reference = "spread/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kRoundRobin,
     .events_per_iteration = 1},
    // get, cudaEventRecord on stream A, cudaStreamWaitEvent on stream B, put
    {.workload = Workload::kSync,
     .name = "sync",
     .variant_kinds = kEveryPool,
     .reference = "sync/private",
     .backends = Backends::kCudaOnly,
     .placement = Placement::kRoundRobin,
     .events_per_iteration = 1},
    // what a scheduler does: a 256-byte cudaMemsetAsync on A, then get, record on A, B waits on
    // it, put; then the same with A and B swapped
    {.workload = Workload::kSchedule,
     .name = "schedule",
     .variant_kinds = kEveryPool,
     .reference = "schedule/private",
     .backends = Backends::kCudaOnly,
     .placement = Placement::kRoundRobin,
     .events_per_iteration = 2},
    // one cudaGraphLaunch on A of kGraphSteps schedule steps, which the thread captured before its
    // timed loop: their Gets and Puts ran then, and a replay runs none (the records and waits are
    // graph edges). Set against schedule, what an eager event costs over a captured one.
    {.workload = Workload::kGraph,
     .name = "graph",
     .variant_kinds = kEveryPool,
     .reference = "graph/private",
     .backends = Backends::kCudaOnly,
     .placement = Placement::kRoundRobin,
     .events_per_iteration = 2 * kGraphSteps},
    // evpool::wait(B, A, pool), against the same steps (bench/stream_wait_via.h) over the private
    // stacks
    {.workload = Workload::kWait,
     .name = "wait",
     .variant_kinds = kEvpool | kPrivateStacks,
     .reference = "wait/private",
     .backends = Backends::kCudaOnly,
     .placement = Placement::kRoundRobin,
     .events_per_iteration = 1},
    // auto lease = pool.Lease(device), dropped at once. Only the evpool variants have leases; the
    // limit is the private stacks' Get and Put.
    {.workload = Workload::kLease,
     .name = "lease",
     .variant_kinds = kEvpoolFamily,
     .reference = "pair/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 1},
    // pool.LeaseShared(device) and one copy of it, both dropped
    {.workload = Workload::kLeaseShared,
     .name = "lease-shared",
     .variant_kinds = kEvpoolFamily,
     .reference = "pair/private",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 1},
    // threads in pairs, as handoff: thread 2k begins a batch of 64 shared leases and moves them
    // through a BatchRing to thread 2k+1, which drops them (a completion thread ending what a
    // scheduler began); counted where they end. The limit: the same events handed over bare.
    {.workload = Workload::kLeaseHandoff,
     .name = "lease-handoff",
     .variant_kinds = kEvpoolFamily,
     .reference = "handoff/evpool",
     .backends = Backends::kHostAndCuda,
     .placement = Placement::kDeviceZero,
     .events_per_iteration = 64},
};

consteval bool in_enum_order() {
  for (std::size_t i = 0; i < kWorkloadCount; ++i)
    if (kWorkloads[i].workload != static_cast<Workload>(i) || kWorkloads[i].name.empty()) return false;
  return true;
}
static_assert(in_enum_order(), "kWorkloads: one entry per Workload, in enum order");

constexpr const WorkloadInfo &info(Workload workload) {
  return kWorkloads[static_cast<std::size_t>(workload)];
}

}  // namespace evpool::bench
