#!/usr/bin/env python3
"""How Python waits for GPU work: evpool against what users write today (docs/python.md, "Benchmark").

T asyncio tasks (and, separately, T threads) each keep one small piece of GPU work in flight on a
stream of their own and wait for it, through each variant in turn, in one process run:

  asyncio  evpool        await evpool.done(stream)
           evpool-lease  the same, with an evpool lease per request (the stream comes from the pool)
           executor      await loop.run_in_executor(None, event.synchronize)
           host-callback a host function per request (CuPy's launch_host_func: Numba's async_done
                         mechanism) resolving the future through call_soon_threadsafe
           query-poll    event.query() between asyncio.sleep(0) calls
  threads  evpool        evpool.future(stream).result()
           host-callback a host function per request setting a threading.Event
           thread-sync   a thread per stream, blocking in event.synchronize()

The work is a one-element add on a PyTorch tensor (or CuPy array, without PyTorch), or with
--work-us N a kernel that spins about N microseconds (PyTorch's torch.cuda._sleep, its cycles
calibrated first): short work shows what each way of waiting costs per completion, long work what
it costs while nothing completes. Reported per variant and T: completions a second, p50 and p99
latency from just before the enqueue to the waiter's wake-up, cores used (the process's CPU time
over wall time: the poller, executor and driver threads included), and of those, the cores used
by evpool's poller. Prints a table and writes JSON.

Usage: bench/python/completions.py [--concurrency 1,8,64] [--seconds 2] [--work-us N] [--json OUT.json]
"""

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import evpool


class Work:
    """Small GPU work on a stream, and events to record, from PyTorch or else CuPy."""

    def __init__(self, work_us):
        self.spin_cycles = 0
        try:
            import torch

            self.torch, self.cupy = torch, None
            self.name = "torch " + torch.__version__
        except ImportError:
            self.torch = None
        try:
            import cupy

            self.cupy = cupy
        except ImportError:
            self.cupy = None
        if self.torch is None and self.cupy is None:
            sys.exit("bench/python/completions.py: needs PyTorch or CuPy")
        if self.torch is None:
            self.name = "cupy " + self.cupy.__version__
        if work_us > 0:
            if self.torch is None:
                sys.exit("bench/python/completions.py: --work-us needs PyTorch (torch.cuda._sleep)")
            self.spin_cycles = int(work_us * self.cycles_per_us())
            self.name += f", work: a spin of {work_us:g} us ({self.spin_cycles} cycles)"
        else:
            self.name += ", work: a one-element add"

    def cycles_per_us(self):
        """The GPU's spin cycles a microsecond, from timing one long torch.cuda._sleep."""
        torch, cycles = self.torch, 20_000_000
        torch.cuda._sleep(cycles)  # loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1000)

    def stream(self):
        """(library stream, int handle) of a new non-blocking stream."""
        if self.torch is not None:
            stream = self.torch.cuda.Stream(device=0)
            return stream, stream.cuda_stream
        stream = self.cupy.cuda.Stream(non_blocking=True)
        return stream, stream.ptr

    def buffer(self):
        if self.torch is not None:
            return self.torch.zeros(1, device="cuda")
        return self.cupy.zeros(1, dtype=self.cupy.float32)

    def enqueue(self, stream, buffer):
        if self.torch is not None:
            with self.torch.cuda.stream(stream):
                if self.spin_cycles:
                    self.torch.cuda._sleep(self.spin_cycles)
                else:
                    buffer.add_(1)
        else:
            with stream:
                buffer += 1

    def external(self, handle):
        if self.torch is not None:
            return self.torch.cuda.ExternalStream(handle, device=self.torch.device("cuda", 0))
        return self.cupy.cuda.ExternalStream(handle, 0)

    def event(self):
        if self.torch is not None:
            return self.torch.cuda.Event()
        return self.cupy.cuda.Event(disable_timing=True)

    def record(self, event, stream):
        event.record(stream)

    def host_stream(self, handle):
        """A CuPy stream of `handle`, for launch_host_func; None without CuPy."""
        return None if self.cupy is None else self.cupy.cuda.ExternalStream(handle, 0)


def summarize(mode, variant, concurrency, latencies, wall, cpu):
    latencies.sort()
    count = len(latencies)
    return {
        "mode": mode,
        "variant": variant,
        "concurrency": concurrency,
        "completions": count,
        "completions_per_s": count / wall,
        "p50_us": latencies[count // 2] * 1e6 if count else None,
        "p99_us": latencies[min(count - 1, (count * 99) // 100)] * 1e6 if count else None,
        "cores": cpu / wall,
        "wall_s": wall,
    }


async def run_tasks(work, variant, concurrency, seconds):
    loop = asyncio.get_running_loop()
    streams = [work.stream() for _ in range(concurrency)]
    buffers = [work.buffer() for _ in range(concurrency)]
    latencies = []
    stop = time.perf_counter() + seconds

    async def one(index):
        stream, handle = streams[index]
        buffer = buffers[index]
        event = work.event()
        host = work.host_stream(handle)
        while time.perf_counter() < stop:
            start = time.perf_counter()
            if variant == "evpool":
                work.enqueue(stream, buffer)
                await evpool.done(handle)
            elif variant == "evpool-lease":
                with evpool.stream(0) as lease:
                    work.enqueue(work.external(lease.handle), buffer)
                    await evpool.done(lease)
            elif variant == "executor":
                work.enqueue(stream, buffer)
                work.record(event, stream)
                await loop.run_in_executor(None, event.synchronize)
            elif variant == "host-callback":
                work.enqueue(stream, buffer)
                future = loop.create_future()
                host.launch_host_func(lambda f: loop.call_soon_threadsafe(f.set_result, None), future)
                await future
            elif variant == "query-poll":
                work.enqueue(stream, buffer)
                work.record(event, stream)
                while not event.query():
                    await asyncio.sleep(0)
            latencies.append(time.perf_counter() - start)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(concurrency)))
    return summarize("asyncio", variant, concurrency, latencies, time.perf_counter() - wall,
                     time.process_time() - cpu)


def run_threads(work, variant, concurrency, seconds):
    streams = [work.stream() for _ in range(concurrency)]
    buffers = [work.buffer() for _ in range(concurrency)]
    per_thread = [[] for _ in range(concurrency)]
    barrier = threading.Barrier(concurrency + 1)
    stop = [0.0]

    def one(index):
        stream, handle = streams[index]
        buffer = buffers[index]
        event = work.event()
        host = work.host_stream(handle)
        woken = threading.Event()
        latencies = per_thread[index]
        barrier.wait()
        while time.perf_counter() < stop[0]:
            start = time.perf_counter()
            work.enqueue(stream, buffer)
            if variant == "evpool":
                evpool.future(handle).result()
            elif variant == "host-callback":
                woken.clear()
                host.launch_host_func(lambda w: w.set(), woken)
                woken.wait()
            elif variant == "thread-sync":
                work.record(event, stream)
                event.synchronize()
            latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    stop[0] = time.perf_counter() + seconds
    cpu, wall = time.process_time(), time.perf_counter()
    barrier.wait()
    for thread in threads:
        thread.join()
    latencies = [latency for thread_latencies in per_thread for latency in thread_latencies]
    return summarize("threads", variant, concurrency, latencies, time.perf_counter() - wall,
                     time.process_time() - cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--work-us", type=float, default=0.0)
    parser.add_argument("--json", default="bench/out/python-completions.json")
    args = parser.parse_args()
    if evpool.device_count() == 0:
        sys.exit("bench/python/completions.py: needs a CUDA device")
    work = Work(args.work_us)
    levels = [int(level) for level in args.concurrency.split(",")]
    async_variants = ["evpool", "evpool-lease", "executor", "host-callback", "query-poll"]
    thread_variants = ["evpool", "host-callback", "thread-sync"]
    if work.cupy is None:
        async_variants.remove("host-callback")
        thread_variants.remove("host-callback")
    results = []

    def measured(run):
        """run()'s figures, with the cores evpool's poller used meanwhile."""
        before = evpool.default_queue().stats()["poller_cpu_seconds"]
        figures = run()
        figures["poller_cores"] = (evpool.default_queue().stats()["poller_cpu_seconds"] - before) / figures["wall_s"]
        return figures

    for concurrency in levels:
        for variant in async_variants:
            results.append(measured(lambda: asyncio.run(run_tasks(work, variant, concurrency, args.seconds))))
        for variant in thread_variants:
            results.append(measured(lambda: run_threads(work, variant, concurrency, args.seconds)))
    poller = evpool.default_queue().stats()
    print(f"# {work.name}, evpool {'free-threaded' if evpool.FREE_THREADED else 'with the GIL'}, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores; evpool's poller used "
          f"{poller['poller_cpu_seconds']:.2f} s of CPU in all")
    print(f"{'mode':8} {'variant':14} {'T':>4} {'completions/s':>14} {'p50 us':>9} {'p99 us':>9} {'cores':>6} "
          f"{'poller':>6}")
    for r in results:
        print(f"{r['mode']:8} {r['variant']:14} {r['concurrency']:>4} {r['completions_per_s']:>14.0f} "
              f"{r['p50_us'] or 0:>9.1f} {r['p99_us'] or 0:>9.1f} {r['cores']:>6.2f} {r['poller_cores']:>6.2f}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as out:
        json.dump({"work": work.name, "python": sys.version, "free_threaded": evpool.FREE_THREADED,
                   "poller_cpu_seconds": poller["poller_cpu_seconds"], "results": results}, out, indent=1)
    print(f"# written: {args.json}")


if __name__ == "__main__":
    main()
