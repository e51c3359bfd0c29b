// evpool scheduler model: Calibration, the per-call costs the model charges, and where each comes
// from.
//
// Design rationale
// ----------------
// The model ranks designs only if its costs are measured ones. Every constant below is taken from
// a micro-benchmark in bench/results (a file and a figure named beside it), or from the code the
// stacks run (an option's default), or, where no micro-benchmark isolates it, stated as an
// assumption. None is fitted to the scheduler benchmark's own results
// (bench/results/h100/verdict/scheduler-*): those are what the model is checked against, and
// fitting to them would make the check circular.
//
// The driver figures are the H200 host's (bench/results/h200/), the only host with the
// micro-benchmarks of single calls; where the H100 host measured the same thing
// (bench/results/h100/verdict/streams-synced-tables.md) it is used instead, since the ranking is
// checked against that host. How a figure becomes a constant: a loop of one kind of call on one
// thread gives the call's whole cost; the same loop on 16 threads, where the driver serialises
// the calls, gives the lock's hold plus its hand-over per call.
#pragma once

#include "scheduler_model/virtual_time.h"

namespace evpool::model {

struct Calibration {
  // ---- The host ------------------------------------------------------------------------------
  /// bench/results/h100/verdict/machine.txt: nproc=16.
  int cores = 16;

  // ---- The driver: one lock (host_model.h) -----------------------------------------------------
  /// Hand-over of the driver's lock to a thread that queued for it. h200/tables.md, cuda/sync,
  /// `private`: 2.89 M record+wait pairs/s on 1 thread (0.346 us a pair), 1.36 M on 16 (0.735 us a
  /// pair, serialised): (0.735 - 0.346) / 2 calls.
  Time driver_handover = 195;
  /// cudaEventRecord and cudaStreamWaitEvent, held under the lock: cuda/sync, `private`, 1 thread,
  /// 0.346 us a record+wait pair, split evenly (no figure separates them).
  Time record_hold = 173;
  Time wait_hold = 173;
  /// A kernel launch. h200/streams-tables.md, loop, `private` (a 4-byte cudaMemsetAsync per unit,
  /// no query): 0.743 M/s on 1 thread (1.35 us a launch), 0.793 M/s on 16 (1.26 us serialised,
  /// hand-over included): held 1.26 - 0.195 = 1.07 us, the rest (0.28 us) outside the lock.
  Time launch_hold = 1065;
  Time launch_outside = 280;
  /// cudaStreamQuery / cuEventQuery. h200/streams-tables.md, pair: `evpool` (one query per Get)
  /// 2.573 M/s against `evpool-at-once` (none) 33.8 M/s on 1 thread: 0.389 - 0.030 = 0.36 us.
  /// (On 16 threads the same difference is 0.62 us serialised, 0.36 + hand-over 0.2: consistent.)
  Time query_hold = 359;
  /// cudaStreamSynchronize / cudaEventSynchronize / cudaDeviceSynchronize's own serialised cost.
  /// h100/verdict/streams-synced-tables.md, `private` at 16 threads: 0.405 M units/s (2.47 us a unit
  /// of lease + launch + synchronize, serialised): 2.47 - launch (1.065 + 0.195) - hand-over 0.195.
  Time synchronize_hold = 1015;
  /// cudaEventCreate: field notes (../shared/field-notes.md), create + destroy about 0.5 us on one
  /// thread: half of it.
  Time event_create_hold = 250;
  /// cudaStreamCreate: no micro-benchmark; assumed 10 us. Pools are warm in the timed run (the
  /// model, as the benchmark, runs each stack once untimed first), so it is rarely paid.
  Time stream_create_hold = 10'000;

  // ---- The pools ---------------------------------------------------------------------------------
  /// evpool's thread caches: h200/tables.md, cuda/pair, evpool, 1 thread 117 M Get+Put/s.
  Time evpool_pool_op = 4;
  /// DALI's yielding spinlock pools: field notes, spinlock, 39.7 M Get+Put/s on 1 thread (12 ns an
  /// operation), 0.59 M/s on 16 (1.7 us a pair serialised: a yield per hand-over).
  Time spinlock_hold = 12;
  Time spinlock_handover = 830;
  /// std::mutex pools: field notes, mutex, 21.4 M/s on 1 thread (23 ns an operation), 3.2 M/s on 16
  /// (0.31 us a pair serialised). The ready queue and the competitors' completion queues are
  /// std::mutex too, and take these costs.
  Time mutex_hold = 23;
  Time mutex_handover = 133;
  /// PyTorch's round-robin counter: one atomic increment, about an uncontended pool operation.
  Time round_robin_op = 4;

  // ---- Completion mechanisms, from their code -------------------------------------------------------
  /// evpool's poller: CompletionQueueOptions' defaults (include/evpool/basic_completion_queue.h):
  /// spin_for 50 us, max_sleep 200 us; first backoff sleep 1 us (detail/poller_wait.h).
  Time poller_spin_for = 50'000;
  Time poller_first_sleep = 1'000;
  Time poller_max_sleep = 200'000;
  /// The poller's own work per request taken from a channel and per callback run, besides its
  /// driver calls: a few pointer moves; assumed 30 ns.
  Time poller_per_request = 30;
  /// A pass's own work besides its queries (taking each channel's requests, the clock for the
  /// pacing): assumed 100 ns.
  Time poller_pass = 100;
  /// TensorFlow's EventMgr: polling_active_delay_usecs = 10 us, plus the 1 us timer slack its
  /// polling thread sets (bench/competitors/fifo_event_poller.h).
  Time tf_poll_delay = 11'000;
  /// Its callback thread spins kCallbackSpins = 2500 pauses before it sleeps; a pause is about
  /// 40 ns on recent x86 (assumed): 100 us.
  Time tf_callback_spin = 100'000;
  /// PyTorch-style waiters: one per core (pytorch_stack.h, hardware_concurrency()).

  // ---- The OS (assumed: no micro-benchmark here isolates them) -----------------------------------------
  /// A futex wake: the waker's system call.
  Time futex_wake_cost = 1'500;
  /// A futex wait: the sleeper's system call before it sleeps.
  Time futex_wait_cost = 1'000;
  /// From a wake to the woken thread running (an idle core leaving its sleep state, the
  /// scheduler). Timed sleeps end with the timer's 1 us slack instead.
  Time wake_latency = 5'000;
  Time timer_slack = 1'000;

  // ---- The GPU (assumed) ----------------------------------------------------------------------
  /// CUDA_DEVICE_MAX_CONNECTIONS' default.
  int connections = 8;
  /// From a kernel leaving its hardware queue to it running: no micro-benchmark isolates it;
  /// assumed 1 us, below the 1.57 us a dependent memset step took in h200/tables.md, cuda/schedule,
  /// `private`, 1 thread (0.638 M steps/s, which bounds it from above).
  Time kernel_start_latency = 1'000;
  /// From the GPU reaching a point (a record, a stream's last work) to the host seeing it: a query
  /// or a synchronisation reads the completion the GPU writes back. h100/verdict/
  /// completions-openloop-tables.md, 16 threads at 25% load (the poller is not the bottleneck
  /// there): enqueue-to-callback of a 4-byte cudaMemsetAsync, median 13.8 us with a thread per
  /// stream in cudaEventSynchronize (13.5 us through evpool's queue). Of that, the model charges
  /// the launch (0.28 + 1.07 us), the record (0.17 us), the start latency (1 us) and the
  /// synchronisation's return (1.02 us): 3.5 us; the rest, 10.3 us, is this.
  Time completion_seen_latency = 10'300;
  /// cudaGraphLaunch of the whole graph: assumed one launch's cost.
  Time graph_launch_hold = 1'065;
};

}  // namespace evpool::model
