// evpool._testing: the Python API (bind_api.h, the very binding code of evpool._evpool) over the
// C++ tests' host backends, and the controls that stand in for a GPU: pytest tests every binding
// on a machine without one (python/tests/, docs/python.md "Testing").
//
// The host world has two devices. Its streams are HostStreamBackend tokens: a pool sees one busy
// for as many of its queries as make_busy() says (test/support/host_stream_backend.h). What
// completions see is each stream's HostWorkStream (test/support/host_completion_backend.h): every
// request records one piece of work on it, which completes when a test calls complete(), or ends
// with an error status after fail(). A stream's HostWorkStream is made on its first use and lives
// as long as the process (requests may point into it), so a handle that no host stream has is
// refused with ValueError, as no CUDA stream could be told apart.
//
// Not part of evpool's API: installed only so that pytest can run against an installed package
// (the GPU host runs the same suite against the wheel).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bind_api.h"
#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_policy.h"
#include "support/host_completion_backend.h"
#include "support/host_stream_backend.h"

namespace evpool::python {
namespace {

constexpr int kDevices = 2;

using HostStreamPool = BasicHandlePool<test::HostStreamBackend, StreamPoolPolicy>;
using HostEventPool = BasicHandlePool<HostBackend>;

// The backends, their process-wide pools, and what the controls record. Made on first use and
// never destroyed: pools and requests may be in use while the interpreter exits.
struct HostWorld {
  test::HostStreamBackend streams{kDevices};
  HostBackend events{kDevices};
  HostEventPool completion_events{events};
  test::HostCompletionBackend completions{completion_events};
  HostStreamPool stream_pool{streams};
  HostEventPool event_pool{events};

  std::mutex mutex;  // the maps and the log below
  std::unordered_map<std::uint64_t, std::unique_ptr<test::HostWorkStream>> work_streams;
  struct Recorded {
    test::HostWork *work;
    std::uint64_t number;
  };
  std::unordered_map<std::uint64_t, Recorded> event_records;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> waits;

  static HostWorld &get() {
    static HostWorld *world = new HostWorld;
    return *world;
  }

  // The HostWorkStream of stream token `token`, made on first use. Throws nb::value_error for a
  // number that no host stream has.
  test::HostWorkStream &work_stream(std::uint64_t token) {
    const int device = HostBackend::device_of(token);
    const std::uint64_t serial = HostBackend::serial_of(token);
    if (device >= kDevices || serial == 0 || serial > streams.created())
      throw nb::value_error(("evpool._testing: no host stream has the handle " + std::to_string(token) +
                             " (device " + std::to_string(device) + ", serial " + std::to_string(serial) + ")")
                                .c_str());
    const std::lock_guard lock(mutex);
    std::unique_ptr<test::HostWorkStream> &stream = work_streams[token];
    if (!stream) stream = std::make_unique<test::HostWorkStream>(device);
    return *stream;
  }
};

// What hold_inbox_wakeups() sets: each wake-up of a loop's inbox waits that long after its chain
// is published (LoopInbox's BeforeWake), so that a test can close the loop meanwhile.
struct HeldInboxWakeups {
  static inline std::atomic<std::int64_t> hold_us{0};
  static inline std::atomic<std::uint64_t> begun{0}, ended{0};
  static void before_wake() noexcept {
    const std::int64_t hold = hold_us.load();
    if (hold == 0) return;
    begun.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(hold));
    ended.fetch_add(1);
  }
};

struct HostTraits {
  using stream_pool = HostStreamPool;
  using stream_lease = HostStreamPool::unique_lease;
  using event_pool = HostEventPool;
  using event_lease = HostEventPool::unique_lease;
  using completion_backend = test::HostCompletionBackend;
  using inbox_before_wake = HeldInboxWakeups;
  static constexpr unsigned kCompletionEventFlags = 0;

  // Host tokens have no flags, priorities or reuse policy: those arguments are accepted and unused.
  static std::unique_ptr<stream_pool> make_stream_pool(unsigned flags, int, std::size_t max_idle, bool,
                                                       std::size_t cap) {
    return std::make_unique<stream_pool>(HostWorld::get().streams, flags, max_idle, Checks::kDefault, cap);
  }
  static stream_pool &stream_pool_instance(unsigned, int) { return HostWorld::get().stream_pool; }
  static std::unique_ptr<event_pool> make_event_pool(unsigned flags, std::size_t max_idle) {
    return std::make_unique<event_pool>(HostWorld::get().events, flags, max_idle);
  }
  static event_pool &event_pool_instance(unsigned) { return HostWorld::get().event_pool; }

  static stream_lease lease_stream(stream_pool &pool, int device) { return pool.Lease(device); }
  static event_lease lease_event(event_pool &pool, int device) { return pool.Lease(device); }
  // Waiting for a host stream is asking it until it is idle (each query is a tick of its clock).
  static void end_synchronized(stream_lease &lease) {
    while (HostWorld::get().streams.has_pending_work(lease.get())) std::this_thread::yield();
    lease.reset_known_idle();
  }

  static test::HostWorkStream *completion_stream(std::uintptr_t address) {
    return &HostWorld::get().work_stream(address);
  }

  static void record(event_lease &event, std::uintptr_t stream) {
    HostWorld &world = HostWorld::get();
    test::HostWork &work = world.work_stream(stream).work();
    const std::lock_guard lock(world.mutex);
    world.event_records[event.get()] = {&work, work.enqueued()};
  }
  static bool query(event_lease &event) {
    HostWorld &world = HostWorld::get();
    const std::lock_guard lock(world.mutex);
    const auto found = world.event_records.find(event.get());
    return found == world.event_records.end() || found->second.work->completed() >= found->second.number;
  }
  static void synchronize(event_lease &event) {
    while (!query(event)) std::this_thread::yield();
  }
  static void wait(std::uintptr_t consumer, std::uintptr_t producer, event_pool &pool) {
    HostWorld &world = HostWorld::get();
    world.work_stream(consumer);
    world.work_stream(producer);
    const event_lease event = pool.Lease(HostBackend::device_of(producer));  // as wait() takes one
    const std::lock_guard lock(world.mutex);
    world.waits.emplace_back(consumer, producer);
  }
  static completion_backend completion_backend_for(event_pool &) { return HostWorld::get().completions; }
  static std::string error_name(int status) {
    return status == test::HostCompletionBackend::kCreateFailed ? "hostEventCreateFailed"
                                                                : "hostError" + std::to_string(status);
  }
};

test::HostWorkStream &work_of(nb::handle stream) {
  return HostWorld::get().work_stream(stream_address<LeaseObject<HostTraits::stream_lease>>(stream));
}

}  // namespace
}  // namespace evpool::python

NB_MODULE(_testing, m) {
  using namespace evpool::python;
  using evpool::test::HostWorkStream;
  m.doc() = "evpool's bindings over the host backends of its C++ tests: for evpool's own tests only.";
  register_exception_translators();
  bind_api<HostTraits>(m);
  m.attr("DEVICES") = kDevices;
  m.def("device_count", [] { return kDevices; });

  m.def(
      "complete",
      [](nb::handle stream, std::optional<std::uint64_t> through) {
        HostWorkStream &work = work_of(stream);
        if (through)
          work.complete_through(*through);
        else
          work.complete_all();
      },
      nb::arg("stream"), nb::arg("through") = nb::none(),
      "Completes the stream's work, all of it or through the request numbered `through` (1, 2, ...).");
  m.def(
      "fail",
      [](nb::handle stream, int status) {
        HostWorkStream &work = work_of(stream);
        work.fail_from(work.completed() + 1, status);
        work.complete_all();
      },
      nb::arg("stream"), nb::arg("status"),
      "The stream's pending work ends with `status` (a sticky error: later work too).");
  m.def(
      "enqueued", [](nb::handle stream) { return work_of(stream).enqueued(); }, nb::arg("stream"));
  m.def(
      "completed", [](nb::handle stream) { return work_of(stream).completed(); }, nb::arg("stream"));
  m.def(
      "fail_records", [](nb::handle stream, int status) { work_of(stream).fail_records(status); },
      nb::arg("stream"), nb::arg("status"),
      "Requests on the stream fail to record, with `status` (0: they record again).");
  m.def(
      "set_capturing", [](nb::handle stream, bool capturing) { work_of(stream).set_capturing(capturing); },
      nb::arg("stream"), nb::arg("capturing"), "A capturing stream is refused by notify (ValueError).");
  m.def(
      "make_busy",
      [](nb::handle stream, std::uint32_t queries) {
        HostWorld::get().streams.make_busy(stream_address<LeaseObject<HostTraits::stream_lease>>(stream), queries);
      },
      nb::arg("stream"), nb::arg("queries"), "The pool finds the stream busy for its next `queries` queries.");
  m.def(
      "early_finishes", [] { return HostWorld::get().completions.early_finishes(); },
      "Requests finished before their own work was done: always 0 unless the queue is broken.");
  m.def(
      "hold_inbox_wakeups",
      [](double seconds) {
        if (!(seconds >= 0 && seconds <= 10))
          throw nb::value_error(
              ("evpool._testing: hold_inbox_wakeups takes 0 to 10 seconds, not " + std::to_string(seconds)).c_str());
        HeldInboxWakeups::hold_us.store(static_cast<std::int64_t>(seconds * 1e6));
      },
      nb::arg("seconds"),
      "Each wake-up of a loop's inbox waits `seconds` between the chain's publication and the "
      "eventfd write (0: none).");
  m.def(
      "inbox_wakeups_held",
      [] { return std::pair(HeldInboxWakeups::begun.load(), HeldInboxWakeups::ended.load()); },
      "(begun, ended): the wake-ups held so far, and those whose hold has ended.");
  m.def("waits", [] {
    HostWorld &world = HostWorld::get();
    const std::lock_guard lock(world.mutex);
    return world.waits;
  });
}
