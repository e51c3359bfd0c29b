// evpool's Python bindings: the API, written once over a module's traits, so that the module
// users run (_evpool, over CUDA) and the test module (_testing, over the C++ tests' host backends)
// are the same binding code. pytest drives the second on any machine (python/tests/).
//
// Design rationale
// ----------------
// The binding converts and releases the GIL; what a Python reader expects to read in Python (the
// asyncio helper, the package's defaults, the delivery of completions) is in python/evpool/. The
// leases' context-manager methods are here, not in Python, because a lease is the hot path of a
// scheduler step and a Python wrapper would add a frame to each.
//
// `Traits` gives:
//   stream_pool, stream_lease, event_pool, event_lease, completion_backend (types)
//   make_stream_pool(flags, priority, max_idle, reuse_at_once, cap) -> std::unique_ptr<stream_pool>
//   stream_pool_instance(flags, priority) -> stream_pool &
//   make_event_pool(flags, max_idle) -> std::unique_ptr<event_pool>
//   event_pool_instance(flags) -> event_pool &
//   lease_stream(pool, device) -> stream_lease;  lease_event(pool, device) -> event_lease
//   end_synchronized(stream_lease &)             (waits; called without the GIL)
//   address_of(handle) -> std::uintptr_t;  pool_stream(address) -> pool stream handle
//   completion_stream(address) -> completion_backend::stream_type (throws for an unknown one)
//   record(event_lease &, address), query(event_lease &) -> bool, synchronize(event_lease &)
//   wait(consumer, producer, event_pool &)        (addresses; called without the GIL)
//   completion_backend_for(event_pool &) -> completion_backend
//   error_name(status) -> std::string
//
// Thread-safety: pools and queues are thread-safe in C++. A lease object counts the calls that use
// its lease (with(): a record or a synchronization, which release the GIL), and an end() on
// another thread meanwhile leaves the handing back to the last of them: a thread that ends a lease
// another uses gets its lease ended, never a handle freed under the other's call. Its state is
// guarded by a mutex in the free-threaded build (nb::ft_mutex), by the GIL in the other.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "evpool/basic_handle_pool.h"
#include "evpool/detail/fork_guard.h"
#include "evpool/pool_cap.h"
#include "evpool/pool_stats.h"
#include "python_completion_queue.h"
#include "stream_argument.h"

namespace evpool::python {

namespace nb = nanobind;

/// One asyncio loop's inbox (loop_inbox.h), as Python holds it: evpool/_api.py makes one per loop
/// and module, and the loop's reader of its eventfd takes from it and keeps it alive. When it goes
/// (its loop closed, or the garbage collector cleared it: inbox_clear), what it holds is dropped,
/// and the poller drops what comes for it later.
template <class Queue>
struct AsyncioInbox {
  std::shared_ptr<typename Queue::Inbox> inbox = std::make_shared<typename Queue::Inbox>();
  AsyncioInbox() = default;
  AsyncioInbox(const AsyncioInbox &) = delete;
  AsyncioInbox &operator=(const AsyncioInbox &) = delete;
  ~AsyncioInbox() { Queue::close_inbox(*inbox); }  // Python's dealloc: under the GIL
};

// The garbage collector's view of an inbox: the futures it holds, which hold their loop, whose
// reader holds the inbox. A loop dropped unclosed is such a cycle, seen only through these.
template <class Queue>
int inbox_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  return Queue::traverse_inbox(*nb::inst_ptr<AsyncioInbox<Queue>>(self)->inbox, visit, arg);
}

template <class Queue>
int inbox_clear(PyObject *self) {
  if (nb::inst_ready(self)) Queue::close_inbox(*nb::inst_ptr<AsyncioInbox<Queue>>(self)->inbox);
  return 0;
}

inline nb::dict to_dict(const DeviceStats &stats) {
  nb::dict out;
  out["created"] = stats.created;
  out["destroyed"] = stats.destroyed;
  out["gets"] = stats.gets;
  out["gets_hit"] = stats.gets_hit;
  out["gets_missed"] = stats.gets_missed;
  out["puts"] = stats.puts;
  out["puts_adopted"] = stats.puts_adopted;
  out["idle"] = stats.idle;
  out["idle_in_depot"] = stats.idle_in_depot;
  out["idle_in_caches"] = stats.idle_in_caches;
  out["retired"] = stats.retired;
  out["busy"] = stats.busy;
  out["outstanding"] = stats.outstanding;
  out["outstanding_peak_bound"] = stats.outstanding_peak_bound;
  return out;
}

/// {"devices": [per device], "total": {...}}, pool_stats.h's figures by name.
inline nb::dict to_dict(const PoolStats &stats) {
  nb::list devices;
  for (const DeviceStats &device : stats.devices) devices.append(to_dict(device));
  nb::dict out;
  out["devices"] = devices;
  out["total"] = to_dict(stats.total());
  return out;
}

/// A pool of the Python API: a process-wide pool (borrowed, never destroyed) or one of its own.
template <class Pool>
class PoolObject {
 public:
  explicit PoolObject(Pool &shared) noexcept : pool_(&shared) {}
  explicit PoolObject(std::unique_ptr<Pool> own) noexcept : own_(std::move(own)), pool_(own_.get()) {}
  Pool &pool() const noexcept { return *pool_; }
  bool process_wide() const noexcept { return own_ == nullptr; }

 private:
  std::unique_ptr<Pool> own_;
  Pool *pool_;
};

/// One lease of the Python API; `Lease` is the C++ lease. Thread-safe (see the top).
template <class Lease>
class LeaseObject {
 public:
  LeaseObject(Lease &&lease, const char *noun) noexcept : lease_(std::move(lease)), noun_(noun) {}

  /// The handle as an int. Throws RuntimeError for an ended lease, or one begun before fork().
  std::uintptr_t handle() const {
    const nb::ft_lock_guard lock(mutex_);
    return reinterpret_cast<std::uintptr_t>(checked("handle").get());
  }
  int device() const {
    const nb::ft_lock_guard lock(mutex_);
    return checked("device").device_id();
  }
  bool active() const {
    const nb::ft_lock_guard lock(mutex_);
    return static_cast<bool>(lease_) && !ended_ && !from_parent();
  }

  /// Hands the handle back (reset(): no backend call, never waits), or, while another thread uses
  /// the lease (with()), has the last such use hand it back. A second end() does nothing.
  void end() noexcept {
    Lease ending;
    {
      const nb::ft_lock_guard lock(mutex_);
      ended_ = true;
      ending = hand_back_if_done();
    }
  }

  /// Runs `use` on the lease, refusing an ended lease as handle() does. `use` may release the GIL
  /// (a record, a synchronization): the lease is counted in use meanwhile, so that an end() on
  /// another thread leaves the handing back to this call.
  template <class F>
  decltype(auto) with(const char *call, F &&use) {
    Lease *held;
    {
      const nb::ft_lock_guard lock(mutex_);
      held = &checked(call);
      ++users_;
    }
    struct Leave {
      LeaseObject &self;
      ~Leave() {
        Lease ending;
        const nb::ft_lock_guard lock(self.mutex_);
        --self.users_;
        ending = self.hand_back_if_done();
      }
    } leave{*this};
    return use(*held);
  }

  /// Takes the lease out (ended here), refusing an ended one as handle() does, and one that
  /// another thread uses (with()).
  Lease take(const char *call) {
    const nb::ft_lock_guard lock(mutex_);
    checked(call);
    if (users_ != 0)
      throw std::logic_error(std::string("evpool: ") + noun_ + " lease in use by another thread: " + call +
                             " needs it alone");
    ended_ = true;
    return std::move(lease_);
  }

 private:
  bool from_parent() const noexcept { return fork_generation_ != detail::fork_generation(); }

  // The lease, to be handed back outside the lock, once it is ended and no with() uses it; else
  // an empty one. Under the lease's mutex.
  Lease hand_back_if_done() noexcept { return ended_ && users_ == 0 ? std::move(lease_) : Lease(); }

  Lease &checked(const char *call) const {
    if (!lease_ || ended_)
      throw std::logic_error(std::string("evpool: ") + noun_ +
                             " lease used after it ended (after its with block, or "
                             "end()): " +
                             call + " needs a live lease; lease a new " + noun_);
    if (from_parent())
      throw std::logic_error(std::string("evpool: ") + noun_ + " lease begun before fork(): its " + noun_ +
                             " is the parent process's; lease a new one in the child");
    return const_cast<Lease &>(lease_);
  }

  // The mutex exists in the free-threaded build only: with the GIL, the GIL orders what it guards
  // (every call below takes the mutex, or holds the GIL, while it reads or writes these).
  mutable nb::ft_mutex mutex_;
  Lease lease_;
  int users_ = 0;       // calls of with() running
  bool ended_ = false;  // end() or take() was called: the last use hands the lease back
  const char *noun_;
  const std::uint32_t fork_generation_ = detail::fork_generation();
};

inline std::size_t limit_or(const std::optional<std::size_t> &limit, std::size_t none) {
  return limit ? *limit : none;
}

template <class Traits>
void bind_api(nb::module_ &m) {
  using StreamPool = PoolObject<typename Traits::stream_pool>;
  using EventPool = PoolObject<typename Traits::event_pool>;
  using StreamLease = LeaseObject<typename Traits::stream_lease>;
  using EventLease = LeaseObject<typename Traits::event_lease>;
  using Queue = PythonCompletionQueue<Traits>;
  using Inbox = AsyncioInbox<Queue>;

  nb::class_<StreamLease>(m, "StreamLease",
                          "An exclusive lease of a pooled stream; handed back by end() or at the end of its with "
                          "block. Implements __cuda_stream__.")
      .def_prop_ro("handle", &StreamLease::handle, "The stream's handle (cudaStream_t) as an int.")
      .def_prop_ro("device", &StreamLease::device)
      .def_prop_ro("active", &StreamLease::active, "Whether the lease still holds its stream.")
      .def("__cuda_stream__", [](const StreamLease &lease) { return nb::make_tuple(0, lease.handle()); })
      .def("end", &StreamLease::end, "Hands the stream back; work still queued on it keeps it out of Gets until done.")
      .def(
          "synchronize_and_end",
          [](StreamLease &lease) {
            auto taken = lease.take("synchronize_and_end");
            nb::gil_scoped_release unlocked;
            Traits::end_synchronized(taken);
          },
          "Waits for the stream's work, then hands it back known idle (the next lease asks the driver nothing).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](StreamLease &lease, nb::args) { lease.end(); });

  nb::class_<EventLease>(m, "EventLease", "A lease of a pooled event; handed back by end() or its with block.")
      .def_prop_ro("handle", &EventLease::handle, "The event's handle (cudaEvent_t) as an int.")
      .def_prop_ro("device", &EventLease::device)
      .def_prop_ro("active", &EventLease::active)
      .def(
          "record",
          [](EventLease &lease, nb::handle stream) {
            const std::uintptr_t address = stream_address<StreamLease>(stream);
            lease.with("record", [&](auto &held) {
              nb::gil_scoped_release unlocked;
              Traits::record(held, address);
            });
          },
          nb::arg("stream"), "Records the event on `stream` (any stream object, or an int handle).")
      .def(
          "query",
          [](EventLease &lease) { return lease.with("query", [](auto &held) { return Traits::query(held); }); },
          "Whether the work before the event's record is done.")
      .def(
          "synchronize",
          [](EventLease &lease) {
            lease.with("synchronize", [](auto &held) {
              nb::gil_scoped_release unlocked;
              Traits::synchronize(held);
            });
          },
          "Waits, without the GIL, for the work before the event's record.")
      .def("end", &EventLease::end)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](EventLease &lease, nb::args) { lease.end(); });

  nb::class_<StreamPool>(m, "StreamPool", "A pool of streams with exclusive, busy-aware leases (cuda_stream_pool.h).")
      .def(
          "__init__",
          [](StreamPool *self, unsigned flags, int priority, std::optional<std::size_t> max_idle_per_device,
             bool reuse_at_once, std::optional<std::size_t> max_per_device) {
            std::unique_ptr<typename Traits::stream_pool> pool;
            {
              nb::gil_scoped_release unlocked;
              pool = Traits::make_stream_pool(flags, priority, limit_or(max_idle_per_device, kUnlimitedIdle),
                                              reuse_at_once, limit_or(max_per_device, kUncapped));
            }
            new (self) StreamPool(std::move(pool));
          },
          nb::arg("flags") = 1, nb::arg("priority") = 0, nb::arg("max_idle_per_device") = nb::none(),
          nb::arg("reuse_at_once") = false, nb::arg("max_per_device") = nb::none())
      .def_static(
          "instance",
          [](unsigned flags, int priority) {
            nb::gil_scoped_release unlocked;
            return new StreamPool(Traits::stream_pool_instance(flags, priority));
          },
          nb::arg("flags") = 1, nb::arg("priority") = 0, "The process-wide pool of these flags and priority.")
      .def(
          "lease",
          [](StreamPool &self, int device) {
            nb::gil_scoped_release unlocked;  // may create a stream, or wait at the cap
            return new StreamLease(Traits::lease_stream(self.pool(), device), "stream");
          },
          nb::arg("device") = -1, "An exclusive lease of an idle stream of `device` (-1: the current device).")
      .def("stats",
           [](const StreamPool &self) {
             PoolStats stats;
             {
               nb::gil_scoped_release unlocked;  // waits for threads in the middle of a call
               stats = self.pool().stats();
             }
             return to_dict(stats);
           })
      .def(
          "trim",
          [](StreamPool &self, std::size_t keep) {
            nb::gil_scoped_release unlocked;
            self.pool().Trim(keep);
          },
          nb::arg("keep_per_device") = 0)
      .def_prop_ro("device_count", [](const StreamPool &self) { return self.pool().device_count(); })
      .def_prop_ro("process_wide", &StreamPool::process_wide);

  nb::class_<EventPool>(m, "EventPool", "A pool of events (cuda_event_pool.h).")
      .def(
          "__init__",
          [](EventPool *self, unsigned flags, std::optional<std::size_t> max_idle_per_device) {
            std::unique_ptr<typename Traits::event_pool> pool;
            {
              nb::gil_scoped_release unlocked;
              pool = Traits::make_event_pool(flags, limit_or(max_idle_per_device, kUnlimitedIdle));
            }
            new (self) EventPool(std::move(pool));
          },
          nb::arg("flags") = 2, nb::arg("max_idle_per_device") = nb::none())
      .def_static(
          "instance",
          [](unsigned flags) {
            nb::gil_scoped_release unlocked;
            return new EventPool(Traits::event_pool_instance(flags));
          },
          nb::arg("flags") = 2)
      .def(
          "lease",
          [](EventPool &self, int device) {
            nb::gil_scoped_release unlocked;
            return new EventLease(Traits::lease_event(self.pool(), device), "event");
          },
          nb::arg("device") = -1)
      .def("stats",
           [](const EventPool &self) {
             PoolStats stats;
             {
               nb::gil_scoped_release unlocked;
               stats = self.pool().stats();
             }
             return to_dict(stats);
           })
      .def(
          "trim",
          [](EventPool &self, std::size_t keep) {
            nb::gil_scoped_release unlocked;
            self.pool().Trim(keep);
          },
          nb::arg("keep_per_device") = 0)
      .def_prop_ro("device_count", [](const EventPool &self) { return self.pool().device_count(); })
      .def_prop_ro("process_wide", &EventPool::process_wide);

  static PyType_Slot inbox_slots[] = {{Py_tp_traverse, reinterpret_cast<void *>(&inbox_traverse<Queue>)},
                                      {Py_tp_clear, reinterpret_cast<void *>(&inbox_clear<Queue>)},
                                      {0, nullptr}};
  nb::class_<Inbox>(m, "_LoopInbox", nb::is_weak_referenceable(), nb::type_slots(inbox_slots),
                    "Where a queue's poller leaves an asyncio loop's finished requests.")
      .def(nb::init<>())
      .def_prop_ro(
          "fd", [](const Inbox &self) { return self.inbox->fd(); }, "The eventfd the loop watches for reading.")
      .def(
          "take", [](Inbox &self) { return Queue::take_from_inbox(*self.inbox); },
          "What the poller left, oldest first: [(future, status, name or None), ...].");

  nb::class_<Queue>(m, "CompletionQueue",
                    "Completions of stream work, delivered to Python in batches (docs/python.md).")
      .def(
          "__init__",
          [](Queue *self, nb::object deliver, EventPool *events, double spin_for, double max_sleep, bool signal) {
            CompletionQueueOptions options;
            options.spin_for = std::chrono::nanoseconds(static_cast<std::int64_t>(spin_for * 1e9));
            options.max_sleep = std::chrono::nanoseconds(static_cast<std::int64_t>(max_sleep * 1e9));
            options.signal = signal ? CompletionSignal::kAuto : CompletionSignal::kEventQuery;
            auto &pool = events != nullptr ? events->pool()
                                           : Traits::event_pool_instance(Traits::kCompletionEventFlags);
            new (self) Queue(Traits::completion_backend_for(pool), options, std::move(deliver));
          },
          nb::arg("deliver"), nb::arg("events").none() = nb::none(), nb::arg("spin_for") = 50e-6,
          nb::arg("max_sleep") = 200e-6, nb::arg("signal") = false)
      .def(
          "_request",
          [](Queue &self, nb::handle stream, int kind, nb::handle target, Inbox *inbox) {
            if (kind < 0 || kind > static_cast<int>(Target::kAsyncio))
              throw nb::value_error(("evpool: unknown completion target kind " + std::to_string(kind)).c_str());
            self.request(Traits::completion_stream(stream_address<StreamLease>(stream)),
                         static_cast<Target>(kind), target, inbox != nullptr ? inbox->inbox : nullptr);
          },
          nb::arg("stream"), nb::arg("kind"), nb::arg("target"), nb::arg("inbox").none() = nb::none())
      .def("close", &Queue::close)
      .def("_stop_taking_the_gil", &Queue::stop_taking_the_gil)
      .def_prop_ro("closed", &Queue::closed)
      .def_prop_ro("pending", &Queue::pending, "Requests made and not yet delivered to Python.")
      .def("stats", [](const Queue &self) {
        const CompletionQueueStats stats = self.stats();
        std::chrono::nanoseconds poller_cpu{0};
        {
          nb::gil_scoped_release unlocked;  // poller_cpu_time() waits while close() joins the poller
          poller_cpu = self.poller_cpu_time();
        }
        nb::dict out;
        out["requests"] = stats.requests;
        out["completions"] = stats.completions;
        out["queries"] = stats.queries;
        out["signal_reads"] = stats.signal_reads;
        out["signalled"] = stats.signalled;
        out["passes"] = stats.passes;
        out["sleeps"] = stats.sleeps;
        out["pending"] = self.pending();
        out["batches_under_gil"] = self.batches_under_gil();
        out["poller_cpu_seconds"] = static_cast<double>(poller_cpu.count()) * 1e-9;
        return out;
      });

  m.def(
      "wait",
      [](nb::handle consumer, nb::handle producer, EventPool *events) {
        const std::uintptr_t consumer_address = stream_address<StreamLease>(consumer);
        const std::uintptr_t producer_address = stream_address<StreamLease>(producer);
        auto &pool =
            events != nullptr ? events->pool() : Traits::event_pool_instance(Traits::kCompletionEventFlags);
        nb::gil_scoped_release unlocked;
        Traits::wait(consumer_address, producer_address, pool);
      },
      nb::arg("consumer"), nb::arg("producer"), nb::arg("events").none() = nb::none(),
      "Makes `consumer` wait for the work enqueued on `producer` so far, without blocking the host.");
  m.def(
      "stream_handle", [](nb::handle stream) { return stream_address<StreamLease>(stream); }, nb::arg("stream"),
      "The int handle of any stream object (__cuda_stream__) or int; TypeError for anything else.");
  m.def("error_name",
        [](long long status) { return Traits::error_name(static_cast<typename Queue::status_type>(status)); });
}

/// Python exceptions for the library's: std::out_of_range (a device outside the pool) is a
/// ValueError, not nanobind's IndexError; std::logic_error (a lease used after it ended, a queue
/// closed from its own callback) a RuntimeError.
inline void register_exception_translators() {
  nb::register_exception_translator([](const std::exception_ptr &error, void *) {
    try {
      std::rethrow_exception(error);
    } catch (const std::out_of_range &e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument &e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::logic_error &e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

}  // namespace evpool::python
