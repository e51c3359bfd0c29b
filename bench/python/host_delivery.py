#!/usr/bin/env python3
"""How fast completions reach asyncio tasks, without a GPU (docs/python.md, "Benchmark").

T asyncio tasks each ask evpool.testing's queue for the completion of its stream's work, complete
that work at once (the host backend's streams complete when told), and await it: what is measured
is the path from the poller to the awaiting task, which is the same code as on a GPU
(evpool._testing is the binding code of evpool._evpool over the host backends). Prints, per T,
completions a second, p50 latency from the request to the wake-up, the process's cores used, and
how many batches the poller handed over under the GIL.

Usage: bench/python/host_delivery.py [--concurrency 1,8,64] [--seconds 2]
"""

import argparse
import asyncio
import time

from evpool import testing


async def run(queue, pool, concurrency, seconds):
    leases = [pool.lease(0) for _ in range(concurrency)]
    stop = time.perf_counter() + seconds
    latencies = []

    async def one(lease):
        while time.perf_counter() < stop:
            start = time.perf_counter()
            done = queue.done(lease)
            testing.complete(lease)
            await done
            latencies.append(time.perf_counter() - start)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(lease) for lease in leases))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    for lease in leases:
        lease.end()
    latencies.sort()
    return len(latencies) / wall, latencies[len(latencies) // 2] * 1e6, cpu / wall


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,64")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    queue = testing.api.CompletionQueue()
    pool = testing.StreamPool()
    print(f"{'T':>4} {'completions/s':>14} {'p50 us':>9} {'cores':>6}")
    for concurrency in (int(level) for level in args.concurrency.split(",")):
        rate, p50, cores = asyncio.run(run(queue, pool, concurrency, args.seconds))
        print(f"{concurrency:>4} {rate:>14.0f} {p50:>9.1f} {cores:>6.2f}")
    print(f"# batches handed over under the GIL: {queue.stats()['batches_under_gil']}")
    queue.close()


if __name__ == "__main__":
    main()
