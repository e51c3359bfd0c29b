"""Many Python threads leasing and awaiting at once: nothing handed out twice, nothing lost. Run
under free-threaded CPython too (docs/python.md), where the threads truly run at once."""

import asyncio
import threading

from evpool import testing

THREADS = 16
ROUNDS = 200


def test_threads_leasing_and_waiting_for_futures_lose_nothing(api, queue):
    pool = testing.StreamPool()
    held = set()
    held_lock = threading.Lock()
    twice = []
    barrier = threading.Barrier(THREADS)

    def worker():
        barrier.wait()
        for _ in range(ROUNDS):
            with pool.lease(0) as s:
                with held_lock:
                    if s.handle in held:
                        twice.append(s.handle)
                    held.add(s.handle)
                future = queue.future(s)
                testing.complete(s)
                future.result(timeout=60)
                with held_lock:
                    held.discard(s.handle)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert twice == []
    total = pool.stats()["total"]
    assert (total["gets"], total["outstanding"]) == (THREADS * ROUNDS, 0)
    assert queue.pending == 0


def test_threads_each_running_a_loop_of_awaiting_tasks_lose_nothing(api, queue):
    resolved = [0] * THREADS

    async def task(index):
        with api.stream(index % testing.DEVICES) as s:
            done = queue.done(s)
            testing.complete(s)
            await done
            resolved[index] += 1

    def worker(index):
        async def main():
            for _ in range(ROUNDS // 10):
                await asyncio.gather(*(task(index) for _ in range(10)))

        asyncio.run(main())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert resolved == [ROUNDS] * THREADS
    assert queue.pending == 0
