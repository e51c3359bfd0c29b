// evpool bench: the variants of the contention benchmark, in one list (AllVariants, at the end):
// evpool and the designs users would pick instead, each behind one interface, so that a workload
// is written once for all of them.
//
// A variant is built from a backend and the thread count, and offers
//   source(thread)    what that thread gets its events from and puts them back into:
//                     Get(device), Put(event, device), and Lease and LeaseShared for evpool;
//   events_created()  the events created through it so far, pre-warming included: its idle memory;
//   adopt(h, device)  re-owns a raw handle that another thread released (handoff);
//   hit_rate()        only where the pool keeps stats() (evpool's variants): the share of Gets
//                     served by an idle event, reported beside events_created.
// Every variant but LibraryPool counts its events through one CountingBackend (the common base);
// LibraryPool, the library's own CUDAEventPool, exists for the `wait` workload alone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "batch_ring.h"
#include "competitors/boost_event_pool.h"
#include "competitors/mutex_event_pool.h"
#include "competitors/spinlock_event_pool.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/cuda_event_backend.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/pool_policy.h"
#include "support/counting_backend.h"
#include "thread_private_stacks.h"
#include "workloads.h"

namespace evpool::bench {

using testing_support::CountingBackend;

/// The handoff carrier every variant's events travel through: 8 batches of a handoff iteration's
/// events.
inline constexpr std::size_t kHandoffBatch = info(Workload::kHandoff).events_per_iteration;
template <class Handle>
using HandoffRing = BatchRing<Handle, kHandoffBatch, 8>;

/// The most events a producer and consumer pair of handoff hold at once: a full ring, and one
/// batch more between the two threads' hands (the consumer's last ones popped but not yet put,
/// the producer's next ones got but not yet pushed). Pre-warming gets this many per producer.
template <class Handle>
inline constexpr std::size_t kHandoffEventsPerPair = HandoffRing<Handle>::kCapacity + kHandoffBatch;

// The base of the variants: the counting backend they create through (copies share one counter).
template <class Backend>
class CountedVariant {
 public:
  using owner_type = typename Backend::owner_type;
  std::uint64_t events_created() const { return backend_.created(); }
  owner_type adopt(typename Backend::handle_type handle, int device) {
    return backend_.adopt(handle, device);
  }

 protected:
  explicit CountedVariant(const Backend &backend) : backend_(backend) {}
  CountingBackend<Backend> backend_;
};

// One pool shared by all threads; `Pool` is a pool template over a backend.
template <template <class> class Pool, class Backend>
class SharedPool : public CountedVariant<Backend> {
 public:
  SharedPool(const Backend &backend, int /*threads*/)
      : CountedVariant<Backend>(backend), pool_(this->backend_, Backend::kDefaultOptions) {}
  Pool<CountingBackend<Backend>> &source(int /*thread*/) { return pool_; }

  /// Of the Gets so far, pre-warming included, the share served by an idle event: for the pools
  /// that keep stats() (evpool's).
  double hit_rate() const requires Pool<CountingBackend<Backend>>::policy_type::count_calls {
    const DeviceStats total = pool_.stats().total();
    return total.gets == 0 ? 0.0 : static_cast<double>(total.gets_hit) / static_cast<double>(total.gets);
  }

 private:
  Pool<CountingBackend<Backend>> pool_;
};

template <class B>
using EvpoolPool = BasicHandlePool<B>;
template <class B>
using EvpoolNoCachePool = BasicHandlePool<B, NoCachePolicy<>>;
template <class B>
using EvpoolBackoffPool = BasicHandlePool<B, ExponentialBackoffPolicy<>>;
template <class B>
using EvpoolNoStatsPool = BasicHandlePool<B, NoStatsPolicy<>>;
template <class B>
using EvpoolMag32Pool = BasicHandlePool<B, FixedMagazinePolicy<32>>;
template <class B>
using EvpoolMag256Pool = BasicHandlePool<B, FixedMagazinePolicy<256>>;
template <class B>
using SharedEvpool = SharedPool<EvpoolPool, B>;
template <class B>
using SharedEvpoolMag32 = SharedPool<EvpoolMag32Pool, B>;
template <class B>
using SharedEvpoolMag256 = SharedPool<EvpoolMag256Pool, B>;
template <class B>
using SharedEvpoolNoCache = SharedPool<EvpoolNoCachePool, B>;
template <class B>
using SharedEvpoolBackoff = SharedPool<EvpoolBackoffPool, B>;
template <class B>
using SharedEvpoolNoStats = SharedPool<EvpoolNoStatsPool, B>;
template <class B>
using SharedSpinlock = SharedPool<competitors::SpinlockEventPool, B>;
template <class B>
using SharedMutex = SharedPool<competitors::MutexEventPool, B>;
template <class B>
using SharedBoost = SharedPool<competitors::BoostLockfreeEventPool, B>;

template <class Backend>
class PrivateStacks : public CountedVariant<Backend> {
  using Stacks = ThreadPrivateStacks<CountingBackend<Backend>>;
  // The stacks keep what every workload they apply to holds per thread, or the run would create.
  static consteval bool holds_every_workload() {
    for (const WorkloadInfo &workload : kWorkloads)
      if ((workload.variant_kinds & kPrivateStacks) != 0 &&
          workload.events_per_iteration > static_cast<int>(Stacks::kCapacity))
        return false;
    return true;
  }
  static_assert(holds_every_workload());

 public:
  PrivateStacks(const Backend &backend, int threads)
      : CountedVariant<Backend>(backend), stacks_(this->backend_, Backend::kDefaultOptions, threads) {}
  auto &source(int thread) { return stacks_.of_thread(thread); }

 private:
  Stacks stacks_;
};

// No pool: every Get creates an event and every Put destroys it.
template <class Backend>
class NoPool : public CountedVariant<Backend> {
 public:
  using typename CountedVariant<Backend>::owner_type;
  NoPool(const Backend &backend, int /*threads*/) : CountedVariant<Backend>(backend) {}
  NoPool &source(int /*thread*/) { return *this; }
  owner_type Get(int device) {
    return this->adopt(this->backend_.create(Backend::kDefaultOptions, device), device);
  }
  void Put(owner_type &&event, int /*device*/) { this->backend_.destroy(event.release()); }
};

// No pool either, for handoff alone: a fixed set of events cycles between each producer and its
// consumer, going forward through the same HandoffRing as every variant's events and coming back
// through a second BatchRing. So this is the carrier's own limit, the most a pool can reach in
// handoff. Thread 2k only gets, thread 2k+1 only puts.
template <class Backend>
class Carrier : public CountedVariant<Backend> {
  using Handle = typename Backend::handle_type;
  // What circulates per pair; pre-warming gets as many on each producer thread and puts them
  // back, so it must be whole batches, or the last Get would wait for a batch never published.
  static constexpr std::size_t kEventsPerPair = kHandoffEventsPerPair<Handle>;
  static_assert(kEventsPerPair % kHandoffBatch == 0);
  // The way back holds every circulating event and a partly filled batch besides, so a Put never
  // waits.
  using ReturnRing = BatchRing<Handle, kHandoffBatch, 16>;
  static_assert(ReturnRing::kCapacity >= kEventsPerPair + kHandoffBatch);

 public:
  using typename CountedVariant<Backend>::owner_type;

  // The way back of one producer and consumer pair: the source of both.
  class ReturnPath {
   public:
    ReturnPath(Carrier &carrier, int device) : carrier_(carrier) {
      for (std::size_t i = 0; i < kEventsPerPair; ++i)
        ring_.push(carrier_.backend_.create(Backend::kDefaultOptions, device));
    }
    ReturnPath(const ReturnPath &) = delete;
    ReturnPath &operator=(const ReturnPath &) = delete;
    ~ReturnPath() {
      for (Handle handle{}; ring_.try_pop(handle);) carrier_.backend_.destroy(handle);
    }
    /// Producer only: the next event sent back, waiting for it if need be.
    owner_type Get(int device) { return carrier_.adopt(ring_.pop(), device); }
    /// Consumer only.
    void Put(owner_type &&event, int /*device*/) { ring_.push(event.release()); }

   private:
    Carrier &carrier_;
    ReturnRing ring_;
  };

  Carrier(const Backend &backend, int threads) : CountedVariant<Backend>(backend) {
    static_assert(info(Workload::kHandoff).placement == Placement::kDeviceZero);
    for (int pair = 0; pair < threads / 2; ++pair) paths_.push_back(std::make_unique<ReturnPath>(*this, 0));
  }
  Carrier(const Carrier &) = delete;
  Carrier &operator=(const Carrier &) = delete;
  ReturnPath &source(int thread) { return *paths_[static_cast<std::size_t>(thread / 2)]; }

 private:
  std::vector<std::unique_ptr<ReturnPath>> paths_;
};

// The library's own CUDAEventPool, for `wait`: evpool::wait takes nothing else, so this evpool
// cannot count through a CountingBackend. It reports node_count() instead, the most events that
// were ever idle in the pool at once. Nothing here destroys an event (no idle limit, no Trim), and
// pre-warming has every event idle at once, so that is the events created, unless the run created
// more than pre-warming did, when it undercounts by at most one per thread.
class LibraryPool {
 public:
  LibraryPool(const CUDAEventBackend & /*backend*/, int /*threads*/) {}
  std::uint64_t events_created() const { return pool_.node_count(); }
  CUDAEventPool &source(int /*thread*/) { return pool_; }

 private:
  CUDAEventPool pool_;
};

// ---- The list ---------------------------------------------------------------------------------

template <std::size_t N>
struct VariantName {
  constexpr VariantName(const char (&text)[N]) { std::copy_n(text, N, chars); }  // NOLINT: implicit
  char chars[N];
};

/// A variant's entry: its name in the benchmark names, its kind (what workloads it applies to),
/// and its type over a backend.
template <VariantName kNameChars, VariantKind kVariantKind, template <class> class Type>
struct Variant {
  static constexpr std::string_view kName{kNameChars.chars};
  static constexpr VariantKind kKind = kVariantKind;
  template <class Backend>
  using type = Type<Backend>;
};

template <class... Entries>
struct VariantList {
  /// Calls `visit.template operator()<Entry>()` for every entry, in order.
  template <class Visitor>
  static void for_each(Visitor &&visit) {
    (visit.template operator()<Entries>(), ...);
  }
};

// In the order the reports list them.
using AllVariants =
    VariantList<Variant<"evpool", kEvpool, SharedEvpool>,
                // no per-thread cache: every Get and Put on the shared stacks
                Variant<"evpool-nocache", kEvpoolPolicies, SharedEvpoolNoCache>,
                // exponential backoff after a failed compare-exchange of a depot head (the default retries)
                Variant<"evpool-backoff", kEvpoolPolicies, SharedEvpoolBackoff>,
                // magazines that do not grow: always 32 events (the default before magazines grew), or
                // always 256 (the default's largest)
                Variant<"evpool-mag32", kEvpoolPolicies, SharedEvpoolMag32>,
                Variant<"evpool-mag256", kEvpoolPolicies, SharedEvpoolMag256>,
                // no counters (stats() off): what counting costs
                Variant<"evpool-nostats", kEvpoolPolicies, SharedEvpoolNoStats>,
                // DALI's design, the one evpool replaces: one yielding spinlock over per-device lists
                Variant<"spinlock", kCompetitorPools, SharedSpinlock>,
                // a std::mutex and a std::vector per device, as PyTorch pools its events
                Variant<"mutex", kCompetitorPools, SharedMutex>,
                // a boost::lockfree::stack per device, as HPX and pika do
                Variant<"boost", kCompetitorPools, SharedBoost>, Variant<"private", kPrivateStacks, PrivateStacks>,
                Variant<"none", kNoPool, NoPool>, Variant<"carrier", kCarrier, Carrier>>;

}  // namespace evpool::bench
