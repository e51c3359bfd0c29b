// evpool scheduler model: model_run, the example executor (examples/scheduler/executor.h) run on a
// stack in virtual time, with the host, the driver and the GPU of host_model.h and gpu_model.h.
//
// Design rationale
// ----------------
// The executor's loop is modelled step for step: a worker pops a ready task (the ready queue's
// std::mutex, sleeping on its condition variable when empty), leases a stream, waits on each
// input's event, hands its share of the inputs' events back, launches, gets and records its own
// event if another task needs it, asks for the completion, and ends the lease; the completion
// callback counts the successors' inputs down and pushes those it makes ready. What differs is
// each stack's calls, written down below with the file each comes from:
//
// evpool (evpool_stack.h, cuda_steps.h)
//   lease   CUDAStreamPool::Get: asks (cudaStreamQuery) the thread's newest cached stream, then its
//           oldest, then the depot's streams in turn (the busy ones set aside), then the set-aside
//           ones, and creates a stream only if all are busy (include/evpool/cuda_stream_pool.h,
//           detail/device_depots.h take_idle). A worker's cache goes to the depot when the worker
//           ends (each run starts new threads).
//   per input: cudaStreamWaitEvent; launch; CUDAEventPool::Get (a thread cache: evpool_pool_op) +
//           cudaEventRecord for a task with successors
//   notify  CompletionQueue::notify: an event from the pool, cudaEventRecord on the stream, a push
//           on the thread's channel, and a futex wake only if the poller sleeps (poller_wait.h).
//   poller  one thread: takes the channels' requests into a FIFO per (thread, stream), queries the
//           head of each FIFO once a pass (cuEventQuery); after a head completes, asks the newest
//           request of the FIFO and finishes the whole FIFO if it completed, else goes on from the
//           oldest (detail/stream_fifos.h); runs the callbacks on its own thread. Paces itself by
//           detail/poller_wait.h: progress -> next pass at once; none for under spin_for -> at once;
//           then sleeps 1, 2, 4 ... max_sleep us (a request ends the sleep); nothing in flight ->
//           sleeps until a request rings.
// dali (dali_stack.h, enqueued_completions.h, competitors/spinlock_event_pool.h)
//   lease   spinlock pool's Get: the last stream handed back (LIFO), busy or not; creates when empty
//   per input: wait; launch; spinlock event pool Get + record; notify: the callback at once
//   finish   cudaDeviceSynchronize
// dali-exec (dali_exec_stack.h): one stream; no waits; launch; spinlock event Get + record; at once
// pytorch (pytorch_stack.h, competitors/round_robin_streams.h, mutex_event_pool.h,
//          event_sync_threads.h)
//   lease   a round-robin counter over 32 streams created at the first lease
//   per input: wait; launch; mutex event pool Get + record
//   notify  waiter (stream index % cores): an event from the waiter's free list under its mutex,
//           cudaEventRecord, a push under its mutex, a futex wake if it sleeps
//   waiters one per core: pop under the mutex (sleep when empty); cudaEventSynchronize, spinning
//           on its core until the event is reached; the callback; the event back under the mutex
// tensorflow (tensorflow_stack.h, competitors/mutex_event_pool.h, fifo_event_poller.h)
//   lease   mutex pool Get (LIFO, busy or not)
//   per input: wait; launch; mutex event pool Get + record
//   notify  ThenExecute under EventMgr's one mutex: a free event (created when none), record,
//           append, wake the poller if the FIFO was empty; then PollEvents(false): query from the
//           front until the first pending one; callbacks handed to the callback thread
//   poller  under the mutex: query every event not yet seen complete, pop the completed front;
//           callbacks to the callback thread; sleep tf_poll_delay while events are pending
//   callback thread: spins tf_callback_spin for work before it sleeps
// tensorflow-exec (tensorflow_exec_stack.h): one stream; no event, no wait; launch; at once
// limit (limit_stack.h, stream_plan.h, chain_streams.h): streams and events made beforehand; a wait
//   only for an input on another stream; launch; record (own event, no pool) only for a task needed
//   on another stream (needed_elsewhere); at once; cudaDeviceSynchronize
// graph (graph_replay.h): one cudaGraphLaunch; the GPU runs every task on the stream of its slot
//   (slot % width), a wait per input; a synchronisation. The graph's branches get hardware queues
//   of their own (GpuModel's own_queue): the device launches them, not the host's connections.
//
// evpool-planned, evpool-ahead (evpool_planned_stack.h, stream_plan.h, planned_stream_leases.h,
//          executor.h's follows_at_enqueue): the streams of StreamPlan (chain_streams.h, as the
//          limit's), the plan made beforehand
//   lease   the planned stream's first task: CUDAStreamPool::Get (as evpool's); its other tasks
//           take the same stream at no cost; the Lease of its last task (last_on) ends the pool's
//           lease, the stream going back to that worker's cache, busy
//   per input: ahead only, an input with an event on another stream: cudaStreamWaitEvent; launch
//   ahead   a task needed on another stream (needed_elsewhere): CUDAEventPool::Get + cudaEventRecord,
//           the event back once its last successor's wait is enqueued; complete at enqueue
//   planned no event; a task needed on another stream: CompletionQueue::notify (as evpool's, the
//           queue's events from the stack's pool); any other task: complete at enqueue
//   both    once notify returns, each successor on the task's stream counts that input down (the
//           completion skips it); finish: cudaDeviceSynchronize
//
// The run is timed as Executor::run is: from the first tasks made ready (the workers already
// asleep in the ready queue) to the end of the stack's finish(); each stack runs once untimed
// first (the pools fill), as bench/scheduler_bench.cc does.
//
// Thread-safety: model_run may be called from any number of threads at once; each call owns its
// model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "scheduler/chain_streams.h"
#include "scheduler/dag.h"
#include "scheduler/stream_plan.h"
#include "scheduler_model/calibration.h"
#include "scheduler_model/gpu_model.h"
#include "scheduler_model/host_model.h"
#include "scheduler_model/stack_kinds.h"
#include "scheduler_model/virtual_time.h"

namespace evpool::model {

struct ModelResult {
  Time wall = 0;
  double tasks_per_s = 0;
  /// Host cores in use over the timed run: every modelled thread's time on a core over the wall.
  double cores = 0;
  std::uint64_t streams_created = 0;
  std::uint64_t events_created = 0;
  /// Driver calls of the timed run (the driver lock's acquisitions).
  std::uint64_t driver_calls = 0;
};

namespace detail {

using example::Dag;
using example::TaskId;

class SchedulerModel {
 public:
  SchedulerModel(const Dag &dag, StackKind kind, int workers, const Calibration &calibration)
      : dag_(dag), kind_(kind), workers_(workers), c_(calibration), cores_(loop_, calibration.cores),
        driver_(loop_, calibration.driver_handover),
        gpu_(loop_, calibration.connections, calibration.kernel_start_latency, calibration.completion_seen_latency),
        ready_lock_(loop_, calibration.mutex_handover), pool_lock_(loop_, pool_handover(kind, calibration)),
        event_lock_(loop_, pool_handover(kind, calibration)), mgr_lock_(loop_, calibration.mutex_handover),
        callback_lock_(loop_, calibration.mutex_handover) {
    build_stack();
  }
  SchedulerModel(const SchedulerModel &) = delete;
  SchedulerModel &operator=(const SchedulerModel &) = delete;

  ModelResult run() {
    const bool warm_up = kind_ != StackKind::kGraph && kind_ != StackKind::kLimit;
    if (warm_up) run_once();
    const std::uint64_t calls_before = driver_.acquisitions();
    settle_cores();
    std::vector<Time> core_before;
    for (const auto &thread : threads_) core_before.push_back(thread->core_time);
    const Time begin = loop_.now();
    run_once();
    ModelResult result;
    result.wall = loop_.now() - begin;
    result.tasks_per_s =
        result.wall > 0 ? static_cast<double>(dag_.size()) * 1e9 / static_cast<double>(result.wall) : 0;
    settle_cores();
    Time on_core = 0;
    for (std::size_t i = 0; i < threads_.size(); ++i)
      on_core += threads_[i]->core_time - (i < core_before.size() ? core_before[i] : 0);
    result.cores = result.wall > 0 ? static_cast<double>(on_core) / static_cast<double>(result.wall) : 0;
    result.streams_created = gpu_.streams();
    result.events_created = events_created_;
    result.driver_calls = driver_.acquisitions() - calls_before;
    return result;
  }

 private:
  void settle_cores() {
    std::vector<HostThread *> all;
    for (const auto &thread : threads_) all.push_back(thread.get());
    cores_.settle(all);
  }

  // ---- What a task keeps (executor.h's TaskState) ----------------------------------------------------
  struct TaskState {
    std::size_t inputs_left = 0;
    std::size_t uses_left = 0;
    bool has_event = false;
    RecordId event = 0;
    StreamId event_stream = 0;
  };
  struct Request {  // a completion asked for
    TaskId task;
    RecordId record;
  };
  struct Fifo {  // evpool's poller: one per (thread, stream)
    std::deque<Request> requests;
    bool active = false;
  };
  struct Waiter {  // a PyTorch-style waiter thread
    Waiter(EventLoop &loop, Time handover) : lock(loop, handover) {}
    Lock lock;
    std::deque<std::pair<Request, Signal *>> queue;
    WaitList sleepers;
    std::size_t free_events = 0;
  };
  struct TfEntry {
    Request request;
    bool done = false;
  };

  // Whether finish() synchronises the device: the stacks with tasks complete at enqueue.
  bool synchronizes_at_finish() const {
    return kind_ == StackKind::kDali || kind_ == StackKind::kDaliExec ||
           kind_ == StackKind::kTensorflowExec || kind_ == StackKind::kLimit || is_planned();
  }
  bool is_planned() const { return kind_ == StackKind::kEvpoolPlanned || kind_ == StackKind::kEvpoolAhead; }
  bool uses_evpool_pools() const { return kind_ == StackKind::kEvpool || is_planned(); }
  bool uses_queue() const { return kind_ == StackKind::kEvpool || kind_ == StackKind::kEvpoolPlanned; }

  HostThread &new_thread() {
    threads_.push_back(std::make_unique<HostThread>());
    threads_.back()->id = static_cast<std::uint32_t>(threads_.size() - 1);
    return *threads_.back();
  }

  // ---- Construction: what each stack makes before it runs -------------------------------------------
  void build_stack() {
    if (kind_ == StackKind::kDaliExec || kind_ == StackKind::kTensorflowExec) {
      one_stream_ = gpu_.create_stream();
    } else if (kind_ == StackKind::kLimit) {
      plan_.emplace(dag_);
      for (std::size_t i = 0; i < plan_->streams(); ++i) limit_streams_.push_back(gpu_.create_stream());
      for (TaskId task = 0; task < dag_.size(); ++task) events_created_ += plan_->needed_elsewhere(task);
    } else if (is_planned()) {
      plan_.emplace(dag_);
      planned_slots_.assign(plan_->streams(), kNoStream);
    }
    if (uses_queue()) loop_.spawn(0, evpool_poller(new_thread()));
    if (kind_ == StackKind::kPytorch) {
      for (int i = 0; i < c_.cores; ++i) {
        waiters_.push_back(std::make_unique<Waiter>(loop_, c_.mutex_handover));
        loop_.spawn(0, pytorch_waiter(new_thread(), *waiters_.back()));
      }
    }
    if (kind_ == StackKind::kTensorflow) {
      loop_.spawn(0, tf_poller(new_thread()));
      loop_.spawn(0, tf_callback_thread(new_thread()));
    }
  }

  // ---- One run of the executor -------------------------------------------------------------------
  void run_once() {
    states_.assign(dag_.size(), TaskState{});
    for (TaskId task = 0; task < dag_.size(); ++task) {
      states_[task].inputs_left = dag_.inputs(task).size();
      states_[task].uses_left = dag_.successors(task).size();
    }
    remaining_ = dag_.size();
    ++generation_;
    ready_.clear();
    closed_ = false;
    run_over_ = false;
    if (kind_ == StackKind::kGraph) {
      loop_.spawn(loop_.now(), graph_replay(new_thread()));
    } else {
      for (int i = 0; i < workers_; ++i) {
        HostThread &thread = new_thread();
        loop_.spawn(loop_.now(), worker(thread));
      }
      // The workers park in the ready queue first (spawned before, at the same time), then the
      // first tasks are made ready, each waking a worker.
      loop_.at(loop_.now(), &SchedulerModel::push_roots, this);
      loop_.spawn(loop_.now(), main_thread());
    }
    if (!loop_.run_until([this] { return run_over_; }))
      std::terminate();  // the model stalled: a bug in the model, never a result
  }

  static void push_roots(void *object, std::uint64_t) {
    auto &model = *static_cast<SchedulerModel *>(object);
    for (TaskId task = 0; task < model.dag_.size(); ++task)
      if (model.dag_.inputs(task).empty()) {
        model.ready_.push_back(task);
        model.ready_sleepers_.wake_one(model.loop_, model.c_.wake_latency);
      }
    if (model.dag_.size() == 0) model.close();
  }

  // The thread that called run(): asleep in join until the last task is finished, then finish().
  Task main_thread() {
    if (!closed_) co_await Park{main_sleeper_};
    if (synchronizes_at_finish()) co_await device_synchronize();
    run_over_ = true;
  }

  Task device_synchronize() {
    gpu_.when_idle([this] { idle_sleeper_.wake_one(loop_, 0); });
    co_await Park{idle_sleeper_};  // spinning, as CUDA's default flags do
    co_await driver_.hold(c_.synchronize_hold);
  }

  void close() {
    closed_ = true;
    ready_sleepers_.wake_all(loop_, c_.wake_latency);
    main_sleeper_.wake_one(loop_, c_.wake_latency);
  }

  Task worker(HostThread &thread) {
    const std::uint64_t generation = generation_;  // a worker of an earlier run that wakes late leaves
    std::deque<StreamId> cache;                    // evpool's thread cache of streams
    for (bool first = true;; first = false) {
      if (!first) co_await ready_lock_.hold(c_.mutex_hold);
      if (closed_ || generation != generation_) break;
      if (ready_.empty()) {
        cores_.release(thread);
        co_await Park{ready_sleepers_};
        co_await cores_.acquire(thread);
        co_await Delay{loop_, c_.futex_wait_cost};
        continue;
      }
      const TaskId task = ready_.front();
      ready_.pop_front();
      co_await run_task(thread, task, cache);
    }
    for (const StreamId stream : cache) depot_.push_back(stream);
    cores_.release(thread);
  }

  Task push_ready(HostThread &thread, TaskId task) {
    co_await ready_lock_.hold(c_.mutex_hold);
    ready_.push_back(task);
    if (ready_sleepers_.wake_one(loop_, c_.wake_latency)) co_await Delay{loop_, c_.futex_wake_cost};
    (void)thread;
  }

  // The completion callback (executor.h's completed / finished).
  Task completed(HostThread &thread, TaskId task) {
    for (const TaskId next : dag_.successors(task))
      if (!follows_at_enqueue(task, next) && --states_[next].inputs_left == 0)
        co_await push_ready(thread, next);
    if (--remaining_ == 0) close();
  }

  // executor.h's follows_at_enqueue: the planned stacks' successors on the task's own stream.
  bool follows_at_enqueue(TaskId task, TaskId next) const {
    return is_planned() && plan_->same_stream(task, next);
  }

  // ---- A task, as executor.h's run_task ----------------------------------------------------------
  Task run_task(HostThread &thread, TaskId task, std::deque<StreamId> &cache) {
    if (is_planned()) {
      co_await run_planned_task(thread, task, cache);
      co_return;
    }
    StreamId stream = 0;
    co_await lease_stream(thread, task, cache, stream);
    if (kind_ != StackKind::kDaliExec && kind_ != StackKind::kTensorflowExec)
      for (const TaskId input : dag_.inputs(task)) {
        const TaskState &producer = states_[input];
        if (!producer.has_event) continue;
        if (kind_ == StackKind::kLimit && producer.event_stream == stream) continue;
        co_await driver_.hold(c_.wait_hold);
        gpu_.wait(stream, producer.event);
      }
    for (const TaskId input : dag_.inputs(task))
      if (--states_[input].uses_left == 0 && states_[input].has_event) {
        states_[input].has_event = false;
        co_await put_event(thread);
      }
    co_await launch(stream, task);
    const bool records = kind_ == StackKind::kLimit
                             ? plan_->needed_elsewhere(task)
                             : !dag_.successors(task).empty() && kind_ != StackKind::kTensorflowExec;
    if (records) {
      co_await get_event(thread);
      co_await driver_.hold(c_.record_hold);
      TaskState &own = states_[task];
      own.event = gpu_.record(stream);
      own.has_event = true;
      own.event_stream = stream;
    }
    co_await notify(thread, stream, task);
    co_await end_lease(thread, stream, cache);
  }

  Task launch(StreamId stream, TaskId task) {
    co_await Delay{loop_, c_.launch_outside};
    co_await driver_.hold(c_.launch_hold);
    gpu_.launch(stream, dag_.duration(task).count());
  }

  Task lease_stream(HostThread &thread, TaskId task, std::deque<StreamId> &cache, StreamId &stream) {
    switch (kind_) {
      case StackKind::kEvpool: co_await evpool_get_stream(thread, cache, stream); break;
      case StackKind::kDali:
      case StackKind::kTensorflow:
        co_await pool_lock_.hold(kind_ == StackKind::kDali ? c_.spinlock_hold : c_.mutex_hold);
        if (lifo_streams_.empty()) {
          co_await driver_.hold(c_.stream_create_hold);
          stream = gpu_.create_stream();
        } else {
          stream = lifo_streams_.back();
          lifo_streams_.pop_back();
        }
        break;
      case StackKind::kPytorch:
        co_await Delay{loop_, c_.round_robin_op};
        if (round_robin_.empty())
          for (int i = 0; i < 32; ++i) {
            co_await driver_.hold(c_.stream_create_hold);
            round_robin_.push_back(gpu_.create_stream());
          }
        stream = round_robin_[round_robin_next_++ % round_robin_.size()];
        break;
      case StackKind::kLimit: stream = limit_streams_[plan_->stream_of(task)]; break;
      default: stream = one_stream_;
    }
  }

  Task end_lease(HostThread &thread, StreamId stream, std::deque<StreamId> &cache) {
    if (uses_evpool_pools()) {
      co_await Delay{loop_, c_.evpool_pool_op};
      cache.push_back(stream);
      if (cache.size() > kCacheStreams)  // a full magazine goes to the depot
        for (std::size_t i = 0; i < kCacheStreams / 2; ++i) {
          depot_.push_back(cache.front());
          cache.pop_front();
        }
    } else if (kind_ == StackKind::kDali || kind_ == StackKind::kTensorflow) {
      co_await pool_lock_.hold(kind_ == StackKind::kDali ? c_.spinlock_hold : c_.mutex_hold);
      lifo_streams_.push_back(stream);
    }
    (void)thread;
  }

  // CUDAStreamPool::Get (see the top).
  Task evpool_get_stream(HostThread &thread, std::deque<StreamId> &cache, StreamId &stream) {
    co_await Delay{loop_, c_.evpool_pool_op};
    if (!cache.empty()) {
      co_await driver_.hold(c_.query_hold);
      if (gpu_.idle(cache.back())) {
        stream = cache.back();
        cache.pop_back();
        co_return;
      }
      if (cache.size() > 1) {
        co_await driver_.hold(c_.query_hold);
        if (gpu_.idle(cache.front())) {
          stream = cache.front();
          cache.pop_front();
          co_return;
        }
      }
    }
    while (!depot_.empty()) {
      const StreamId candidate = depot_.front();
      depot_.pop_front();
      co_await driver_.hold(c_.query_hold);
      if (gpu_.idle(candidate)) {
        stream = candidate;
        co_return;
      }
      set_aside_.push_back(candidate);
    }
    for (std::size_t asked = 0; asked < set_aside_.size() && asked < kCacheStreams; ++asked) {
      co_await driver_.hold(c_.query_hold);
      if (gpu_.idle(set_aside_[asked])) {
        stream = set_aside_[asked];
        set_aside_.erase(set_aside_.begin() + static_cast<std::ptrdiff_t>(asked));
        co_return;
      }
    }
    co_await driver_.hold(c_.stream_create_hold);
    stream = gpu_.create_stream();
    (void)thread;
  }

  // ---- Events ----------------------------------------------------------------------------------
  Task get_event(HostThread &thread) {
    if (kind_ == StackKind::kLimit) co_return;  // made beforehand
    if (uses_evpool_pools())
      co_await Delay{loop_, c_.evpool_pool_op};
    else
      co_await event_lock_.hold(kind_ == StackKind::kDali || kind_ == StackKind::kDaliExec ? c_.spinlock_hold
                                                                                           : c_.mutex_hold);
    if (free_events_ == 0) {
      co_await driver_.hold(c_.event_create_hold);
      ++events_created_;
    } else {
      --free_events_;
    }
    (void)thread;
  }

  Task put_event(HostThread &thread) {
    if (kind_ == StackKind::kLimit) co_return;
    if (uses_evpool_pools())
      co_await Delay{loop_, c_.evpool_pool_op};
    else
      co_await event_lock_.hold(kind_ == StackKind::kDali || kind_ == StackKind::kDaliExec ? c_.spinlock_hold
                                                                                           : c_.mutex_hold);
    ++free_events_;
    (void)thread;
  }

  // ---- Completions -------------------------------------------------------------------------------
  Task notify(HostThread &thread, StreamId stream, TaskId task) {
    switch (kind_) {
      case StackKind::kEvpoolPlanned:
        if (!plan_->needed_elsewhere(task)) {
          co_await completed(thread, task);  // complete at enqueue
          break;
        }
        [[fallthrough]];
      case StackKind::kEvpool: {
        co_await get_event(thread);
        co_await driver_.hold(c_.record_hold);
        channel_.push_back({thread_key(thread, stream), Request{task, gpu_.record(stream)}});
        if (poller_bell_.ring(loop_, c_.wake_latency)) co_await Delay{loop_, c_.futex_wake_cost};
        break;
      }
      case StackKind::kPytorch: {
        Waiter &waiter = *waiters_[stream_index(stream) % waiters_.size()];
        co_await waiter.lock.hold(c_.mutex_hold);
        if (waiter.free_events == 0) {
          co_await driver_.hold(c_.event_create_hold);
          ++events_created_;
        } else {
          --waiter.free_events;
        }
        co_await driver_.hold(c_.record_hold);
        const RecordId record = gpu_.record(stream);
        signals_.push_back(std::make_unique<Signal>());
        Signal *signal = signals_.back().get();
        gpu_.when_reached(record, [this, signal] { signal->fire(cores_); });
        co_await waiter.lock.hold(c_.mutex_hold);
        waiter.queue.push_back({Request{task, record}, signal});
        if (waiter.sleepers.wake_one(loop_, c_.wake_latency)) co_await Delay{loop_, c_.futex_wake_cost};
        break;
      }
      case StackKind::kTensorflow: co_await tf_then_execute(thread, stream, task); break;
      default: co_await completed(thread, task);  // at enqueue
    }
  }

  std::uint64_t thread_key(const HostThread &thread, StreamId stream) const {
    return (std::uint64_t{thread.id} << 32) | stream;
  }
  std::size_t stream_index(StreamId stream) const {
    for (std::size_t i = 0; i < round_robin_.size(); ++i)
      if (round_robin_[i] == stream) return i;
    return 0;
  }

  Task evpool_poller(HostThread &thread) {
    Time idle_since = -1;
    Time next_sleep = c_.poller_first_sleep;
    for (;;) {
      if (channel_.empty() && active_.empty()) {  // nothing in flight: sleep until a request rings
        cores_.release(thread);
        co_await poller_bell_.sleep(loop_, -1);
        co_await cores_.acquire(thread);
        continue;
      }
      bool progress = !channel_.empty();
      // At least a nanosecond a pass: a pass that costs nothing would spin without time passing.
      co_await Delay{
          loop_, std::max<Time>(1, c_.poller_pass + c_.poller_per_request * static_cast<Time>(channel_.size()))};
      for (const auto &[key, request] : channel_) {
        auto [place, added] = fifo_index_.try_emplace(key, fifos_.size());
        if (added) fifos_.emplace_back();
        Fifo &fifo = fifos_[place->second];
        fifo.requests.push_back(request);
        if (!fifo.active) {
          fifo.active = true;
          active_.push_back(place->second);
        }
      }
      channel_.clear();
      std::vector<std::size_t> pass = active_;
      for (const std::size_t index : pass) {
        Fifo &fifo = fifos_[index];
        co_await driver_.hold(c_.query_hold);
        if (!gpu_.reached(fifo.requests.front().record)) continue;
        progress = true;
        co_await finish_request(thread, fifo.requests.front());
        fifo.requests.pop_front();
        if (fifo.requests.empty()) continue;
        co_await driver_.hold(c_.query_hold);  // catching up: the newest
        if (gpu_.reached(fifo.requests.back().record)) {
          while (!fifo.requests.empty()) {
            co_await finish_request(thread, fifo.requests.front());
            fifo.requests.pop_front();
          }
          continue;
        }
        while (!fifo.requests.empty()) {  // one by one from the oldest
          co_await driver_.hold(c_.query_hold);
          if (!gpu_.reached(fifo.requests.front().record)) break;
          co_await finish_request(thread, fifo.requests.front());
          fifo.requests.pop_front();
        }
      }
      std::erase_if(active_, [this](std::size_t index) {
        if (!fifos_[index].requests.empty()) return false;
        fifos_[index].active = false;
        return true;
      });
      if (progress) {
        idle_since = -1;
        continue;
      }
      if (idle_since < 0) {
        idle_since = loop_.now();
        next_sleep = c_.poller_first_sleep;
      }
      if (loop_.now() - idle_since < c_.poller_spin_for) continue;
      const Time sleep = next_sleep;
      next_sleep = std::min(next_sleep * 2, c_.poller_max_sleep);
      cores_.release(thread);
      co_await poller_bell_.sleep(loop_, sleep + c_.timer_slack);
      co_await cores_.acquire(thread);
    }
  }

  Task finish_request(HostThread &thread, const Request &request) {
    co_await Delay{loop_, c_.poller_per_request};
    co_await completed(thread, request.task);
    co_await put_event(thread);  // the queue's event goes back
  }

  Task pytorch_waiter(HostThread &thread, Waiter &waiter) {
    for (bool first = true;; first = false) {
      if (!first) co_await waiter.lock.hold(c_.mutex_hold);
      if (waiter.queue.empty()) {
        cores_.release(thread);
        co_await Park{waiter.sleepers};
        co_await cores_.acquire(thread);
        co_await Delay{loop_, c_.futex_wait_cost};
        continue;
      }
      const auto [request, signal] = waiter.queue.front();
      waiter.queue.pop_front();
      co_await signal->spin(cores_, thread);  // cudaEventSynchronize spins
      co_await driver_.hold(c_.synchronize_hold);
      co_await completed(thread, request.task);
      co_await waiter.lock.hold(c_.mutex_hold);
      ++waiter.free_events;
    }
  }

  Task tf_then_execute(HostThread &thread, StreamId stream, TaskId task) {
    co_await mgr_lock_.acquire();
    co_await Delay{loop_, c_.mutex_hold};
    if (tf_free_events_ == 0) {
      co_await driver_.hold(c_.event_create_hold);
      ++events_created_;
    } else {
      --tf_free_events_;
    }
    co_await driver_.hold(c_.record_hold);
    const bool was_empty = tf_fifo_.empty();
    tf_fifo_.push_back({Request{task, gpu_.record(stream)}, false});
    if (was_empty && tf_poller_sleepers_.wake_one(loop_, c_.wake_latency))
      co_await Delay{loop_, c_.futex_wake_cost};
    std::vector<TaskId> done;
    for (TfEntry &entry : tf_fifo_) {  // PollEvents(false): from the front to the first pending
      if (entry.done) continue;
      co_await driver_.hold(c_.query_hold);
      if (!gpu_.reached(entry.request.record)) break;
      entry.done = true;
      ++tf_free_events_;
      done.push_back(entry.request.task);
    }
    while (!tf_fifo_.empty() && tf_fifo_.front().done) tf_fifo_.pop_front();
    mgr_lock_.release();
    co_await hand_to_callback_thread(done);
    (void)thread;
  }

  Task tf_poller(HostThread &thread) {
    for (;;) {
      co_await mgr_lock_.acquire();
      if (tf_fifo_.empty()) {
        mgr_lock_.release();
        cores_.release(thread);
        co_await Park{tf_poller_sleepers_};
        co_await cores_.acquire(thread);
        co_await Delay{loop_, c_.futex_wait_cost};
        continue;
      }
      std::vector<TaskId> done;
      for (TfEntry &entry : tf_fifo_) {  // the sweep: every event not yet seen complete
        if (entry.done) continue;
        co_await driver_.hold(c_.query_hold);
        if (!gpu_.reached(entry.request.record)) continue;
        entry.done = true;
        ++tf_free_events_;
        done.push_back(entry.request.task);
      }
      while (!tf_fifo_.empty() && tf_fifo_.front().done) tf_fifo_.pop_front();
      const bool pending = !tf_fifo_.empty();
      mgr_lock_.release();
      co_await hand_to_callback_thread(done);
      if (pending) {
        cores_.release(thread);
        co_await Delay{loop_, c_.tf_poll_delay};
        co_await cores_.acquire(thread);
      }
    }
  }

  Task hand_to_callback_thread(const std::vector<TaskId> &done) {
    if (done.empty()) co_return;
    co_await callback_lock_.hold(c_.mutex_hold);
    for (const TaskId task : done) callbacks_.push_back(task);
    if (callback_bell_.ring(loop_, 0)) co_return;  // it was spinning for work
    if (callback_sleepers_.wake_one(loop_, c_.wake_latency)) co_await Delay{loop_, c_.futex_wake_cost};
  }

  Task tf_callback_thread(HostThread &thread) {
    for (;;) {
      co_await callback_lock_.hold(c_.mutex_hold);
      if (callbacks_.empty()) {
        // Spins for work on its core first, then sleeps.
        co_await callback_bell_.sleep(loop_, c_.tf_callback_spin);
        if (!callbacks_.empty()) continue;
        co_await callback_lock_.hold(c_.mutex_hold);
        if (!callbacks_.empty()) continue;
        cores_.release(thread);
        co_await Park{callback_sleepers_};
        co_await cores_.acquire(thread);
        co_await Delay{loop_, c_.futex_wait_cost};
        continue;
      }
      const TaskId task = callbacks_.front();
      callbacks_.pop_front();
      co_await completed(thread, task);
    }
  }

  // ---- evpool-planned and evpool-ahead (see the top) ----------------------------------------------
  // executor.h's run_task on EvpoolPlannedStack / EvpoolAheadStack.
  Task run_planned_task(HostThread &thread, TaskId task, std::deque<StreamId> &cache) {
    const std::uint32_t planned = plan_->stream_of(task);
    if (planned_slots_[planned] == kNoStream)  // PlannedStreamLeases::lease: the stream's first task
      co_await evpool_get_stream(thread, cache, planned_slots_[planned]);
    const StreamId stream = planned_slots_[planned];
    for (const TaskId input : dag_.inputs(task)) {  // wait(): an event exists with kEvents alone
      const TaskState &producer = states_[input];
      if (!producer.has_event || producer.event_stream == stream) continue;
      co_await driver_.hold(c_.wait_hold);
      gpu_.wait(stream, producer.event);
    }
    for (const TaskId input : dag_.inputs(task))
      if (--states_[input].uses_left == 0 && states_[input].has_event) {
        states_[input].has_event = false;
        co_await put_event(thread);
      }
    co_await launch(stream, task);
    if (kind_ == StackKind::kEvpoolAhead && plan_->needed_elsewhere(task)) {  // get_event + record
      co_await get_event(thread);
      co_await driver_.hold(c_.record_hold);
      TaskState &own = states_[task];
      own.event = gpu_.record(stream);
      own.has_event = true;
      own.event_stream = stream;
    }
    co_await notify(thread, stream, task);
    for (const TaskId next : dag_.successors(task))  // release_at_enqueue
      if (follows_at_enqueue(task, next) && --states_[next].inputs_left == 0)
        co_await push_ready(thread, next);
    if (plan_->last_on(planned) == task) {  // ~Lease of the stream's last task: the pool's lease ends
      planned_slots_[planned] = kNoStream;
      co_await end_lease(thread, stream, cache);
    }
  }

  // ---- graph (graph_replay.h) ---------------------------------------------------------------------
  Task graph_replay(HostThread &thread) {
    if (graph_streams_.empty())
      for (std::size_t i = 0; i < std::max<std::size_t>(1, dag_.width()); ++i)
        graph_streams_.push_back(gpu_.create_stream(/*own_queue=*/true));
    co_await cores_.acquire(thread);
    co_await driver_.hold(c_.graph_launch_hold);
    std::vector<RecordId> records(dag_.size());
    for (TaskId task = 0; task < dag_.size(); ++task) {
      const StreamId stream = graph_streams_[dag_.slot(task) % graph_streams_.size()];
      for (const TaskId input : dag_.inputs(task)) gpu_.wait(stream, records[input]);
      gpu_.launch(stream, dag_.duration(task).count());
      if (!dag_.successors(task).empty()) records[task] = gpu_.record(stream);
    }
    co_await device_synchronize();
    cores_.release(thread);
    run_over_ = true;
  }

  static constexpr StreamId kNoStream = std::numeric_limits<StreamId>::max();
  static constexpr std::size_t kCacheStreams = 32;

  const Dag &dag_;
  const StackKind kind_;
  const int workers_;
  const Calibration c_;
  EventLoop loop_;
  Cores cores_;
  Lock driver_;
  GpuModel gpu_;
  std::vector<std::unique_ptr<HostThread>> threads_;

  // The executor.
  std::vector<TaskState> states_;
  std::deque<TaskId> ready_;
  Lock ready_lock_;
  WaitList ready_sleepers_;
  WaitList main_sleeper_;
  WaitList idle_sleeper_;
  std::size_t remaining_ = 0;
  bool closed_ = false;
  bool run_over_ = false;
  std::uint64_t generation_ = 0;

  // Pools.
  // DALI's spinlock pools or the mutex pools: one lock for the streams, one for the events.
  static Time pool_handover(StackKind kind, const Calibration &calibration) {
    return kind == StackKind::kDali || kind == StackKind::kDaliExec ? calibration.spinlock_handover
                                                                    : calibration.mutex_handover;
  }
  Lock pool_lock_;
  Lock event_lock_;
  std::vector<StreamId> lifo_streams_;
  std::deque<StreamId> depot_;
  std::vector<StreamId> set_aside_;
  std::vector<StreamId> round_robin_;
  std::size_t round_robin_next_ = 0;
  StreamId one_stream_ = 0;
  std::vector<StreamId> limit_streams_;
  std::vector<StreamId> graph_streams_;
  std::optional<example::StreamPlan> plan_;  // the limit's and the planned stacks'
  std::vector<StreamId> planned_slots_;  // PlannedStreamLeases' slots: by planned stream, the pool's stream
  std::size_t free_events_ = 0;
  std::uint64_t events_created_ = 0;

  // Completion mechanisms.
  std::vector<std::pair<std::uint64_t, Request>> channel_;
  std::map<std::uint64_t, std::size_t> fifo_index_;
  std::vector<Fifo> fifos_;
  std::vector<std::size_t> active_;
  Doorbell poller_bell_;
  std::vector<std::unique_ptr<Waiter>> waiters_;
  std::vector<std::unique_ptr<Signal>> signals_;
  Lock mgr_lock_;
  std::deque<TfEntry> tf_fifo_;
  std::size_t tf_free_events_ = 0;
  WaitList tf_poller_sleepers_;
  Lock callback_lock_;
  std::deque<TaskId> callbacks_;
  Doorbell callback_bell_;
  WaitList callback_sleepers_;
};

}  // namespace detail

/// Runs `dag` on the model of `stack` with `workers` worker threads: once untimed (pools fill),
/// then timed. Deterministic: the same arguments give the same result. Throws std::bad_alloc.
inline ModelResult model_run(const example::Dag &dag, StackKind stack, int workers,
                             const Calibration &calibration = {}) {
  // The model's threads, locks and loop refer to one another: it lives on the heap, in one place.
  auto model = std::make_unique<detail::SchedulerModel>(dag, stack, workers, calibration);
  return model->run();
}

}  // namespace evpool::model
