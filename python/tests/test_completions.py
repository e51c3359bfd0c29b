"""notify, future, await done: over the host backends, whose work completes when a test says so."""

import asyncio
import concurrent.futures
import gc
import os
import select
import socket
import sys
import threading
import time
import weakref

import pytest

import evpool
from evpool import testing


def fresh(device=0):
    """A stream no other test has used: a failed one's error is sticky, as on a GPU."""
    return testing.StreamPool().lease(device)


def done_on(loop, queue, stream):
    """``queue.done(stream)`` asked on ``loop``, which is not running: its future."""

    async def ask():
        return queue.done(stream)

    return loop.run_until_complete(ask())


def complete_and_wait_for_a_held_wakeup(stream):
    """Completes the stream's work and returns once the poller is held before it wakes the loop
    (testing.hold_inbox_wakeups): with the count of holds ended before this one."""
    begun, ended = testing.inbox_wakeups_held()
    testing.complete(stream)
    while testing.inbox_wakeups_held()[0] == begun:
        time.sleep(0.001)
    return ended


def test_a_future_completes_once_the_streams_work_is_done(api, queue):
    with api.stream(0) as s:
        future = queue.future(s)
        assert testing.enqueued(s) == testing.completed(s) + 1
        assert not future.done()
        testing.complete(s)
        assert future.result(timeout=60) is None


def test_a_future_carries_the_streams_error(api, queue):
    with fresh() as s:
        future = queue.future(s)
        testing.fail(s, 700)
        error = future.exception(timeout=60)
    assert isinstance(error, evpool.CUDAError)
    assert (error.status, error.name) == (700, "hostError700")


def test_a_request_that_cannot_record_fails_with_the_records_status(api, queue):
    with api.stream(1) as s:
        testing.fail_records(s, 4)
        try:
            future = queue.future(s)
        finally:
            testing.fail_records(s, 0)
        assert future.exception(timeout=60).status == 4


def test_a_cancelled_concurrent_future_is_left_cancelled(api, queue):
    with api.stream(0) as s:
        future = queue.future(s)
        assert future.cancel()
        after = queue.future(s)
        testing.complete(s)
        after.result(timeout=60)  # delivered in order: the cancelled one is delivered by now
        assert future.cancelled()
        assert queue.pending == 0


def test_notify_calls_back_on_the_poller_with_none_or_the_error(api, queue):
    calls = []
    done = threading.Event()

    def callback(error):
        calls.append((threading.current_thread() is threading.main_thread(), error))
        if len(calls) == 2:
            done.set()

    with api.stream(0) as ok, fresh() as failing:
        queue.notify(ok, callback)
        queue.notify(failing, callback)
        testing.complete(ok)
        testing.fail(failing, 9)
        assert done.wait(60)
    assert [on_main for on_main, _ in calls] == [False, False]
    errors = sorted((error.status if error else 0) for _, error in calls)
    assert errors == [0, 9]


def test_a_callback_that_raises_is_reported_and_the_others_still_run(api, queue, monkeypatch):
    reported = []
    monkeypatch.setattr("sys.unraisablehook", reported.append)
    with api.stream(0) as s:
        queue.notify(s, lambda error: 1 / 0)
        future = queue.future(s)
        testing.complete(s)
        future.result(timeout=60)
    assert len(reported) == 1 and reported[0].exc_type is ZeroDivisionError


def test_notify_refuses_what_it_cannot_call(api, queue):
    with api.stream(0) as s:
        with pytest.raises(TypeError, match="callable"):
            queue.notify(s, None)
        assert testing.enqueued(s) == testing.completed(s)  # nothing was recorded


def test_a_capturing_stream_is_refused_and_keeps_no_reference(api, queue):
    target = concurrent.futures.Future()
    with api.stream(0) as s:
        testing.set_capturing(s, True)
        try:
            with pytest.raises(ValueError, match="capturing"):
                queue._request(s, 1, target)
        finally:
            testing.set_capturing(s, False)
    assert queue.pending == 0
    reference = weakref.ref(target)
    del target
    gc.collect()
    assert reference() is None


def test_a_closed_queue_refuses_requests_and_close_waits_for_those_made(api):
    queue = api.CompletionQueue()
    with api.stream(0) as s:
        future = queue.future(s)
        closer = threading.Thread(target=queue.close)
        closer.start()
        testing.complete(s)  # close() waits for this request's delivery
        closer.join()
        assert future.result(timeout=0) is None
        assert queue.closed and queue.pending == 0
        with pytest.raises(RuntimeError, match="closed"):
            queue.future(s)
    queue.close()  # a second close is harmless


def test_close_from_the_queues_own_callback_is_refused(api, queue):
    raised = concurrent.futures.Future()

    def close_me(error):
        try:
            queue.close()
        except RuntimeError as e:
            raised.set_result(e)

    with api.stream(0) as s:
        queue.notify(s, close_me)
        testing.complete(s)
        assert "own callbacks" in str(raised.result(timeout=60))


async def test_await_done_resolves_on_the_callers_loop(api, queue):
    with api.stream(0) as s:
        loop = asyncio.get_running_loop()
        done = queue.done(s)
        assert done.get_loop() is loop
        testing.complete(s)
        assert await done is None


async def test_await_done_raises_the_streams_error(api, queue):
    with fresh(1) as s:
        done = queue.done(s)
        testing.fail(s, 719)
        with pytest.raises(evpool.CUDAError) as raised:
            await done
    assert raised.value.status == 719


async def test_the_package_level_done_uses_the_default_queue(api):
    with api.stream(0) as s:
        done = api.done(s)
        testing.complete(s)
        await done
    assert api.default_queue().pending == 0


async def test_cancelling_the_awaiting_task_leaks_nothing(api, queue):
    with api.stream(0) as s:
        done = queue.done(s)
        task = asyncio.ensure_future(done)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert done.cancelled()
        reference = weakref.ref(done)
        del done, task
        later = queue.done(s)
        testing.complete(s)
        await later  # delivered in order: the cancelled request is delivered and dropped by now
    assert queue.pending == 0
    gc.collect()
    assert reference() is None


async def test_many_tasks_awaiting_one_stream_all_resolve(api, queue):
    with api.stream(0) as s:
        futures = [queue.done(s) for _ in range(100)]
        testing.complete(s, through=testing.completed(s) + 50)
        await asyncio.gather(*futures[:50])
        assert not any(f.done() for f in futures[50:])
        testing.complete(s)
        await asyncio.gather(*futures)


def test_a_loop_closed_before_its_futures_resolve_drops_them(api, queue):
    loop = asyncio.new_event_loop()
    with api.stream(0) as s:
        reference = weakref.ref(done_on(loop, queue, s))
        loop.close()  # its reader goes, and its inbox with it: the request is dropped when done
        after = queue.future(s)
        testing.complete(s)
        after.result(timeout=60)  # delivered in order: the closed loop's request is dropped by now
        assert queue.pending == 0
        gc.collect()
        assert reference() is None
        assert not loop.is_running()  # the loop itself is still here


def test_a_request_for_a_loop_that_is_gone_is_dropped_by_the_poller(api, queue):
    loop = asyncio.new_event_loop()
    with api.stream(0) as s:
        reference = weakref.ref(done_on(loop, queue, s))
        loop.close()
        del loop  # the inbox is closed before the work completes
        gc.collect()
        after = queue.future(s)
        testing.complete(s)
        after.result(timeout=60)
        assert queue.pending == 0
    gc.collect()
    assert reference() is None


def test_a_loop_closed_while_the_poller_wakes_it_leaves_no_write_to_a_reused_descriptor(api, queue):
    # The poller publishes the loop's request in its inbox and, held here, has not yet written the
    # inbox's eventfd when the loop closes and drops the inbox. Descriptors opened then take the
    # lowest numbers free: had the inbox's eventfd closed with it, one of them would have its
    # number and receive the poller's write.
    loop = asyncio.new_event_loop()
    testing.hold_inbox_wakeups(0.3)
    sockets = []
    try:
        with api.stream(0) as s:
            done_on(loop, queue, s)
            ended = complete_and_wait_for_a_held_wakeup(s)
            loop.close()
            gc.collect()
            sockets = [end for _ in range(8) for end in socket.socketpair()]
            while testing.inbox_wakeups_held()[1] == ended:
                time.sleep(0.001)
            readable, _, _ = select.select(sockets, [], [], 0)
            assert readable == [], "the poller wrote into a descriptor that the closed inbox's number went to"
    finally:
        testing.hold_inbox_wakeups(0)
        for end in sockets:
            end.close()
    assert queue.pending == 0


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_loop_dropped_unclosed_goes_to_the_garbage_collector_with_its_requests(api, queue):
    loop = asyncio.new_event_loop()
    with api.stream(0) as s:
        reference, loop_reference = weakref.ref(done_on(loop, queue, s)), weakref.ref(loop)
        after = queue.future(s)
        testing.complete(s)
        after.result(timeout=60)  # delivered in order: the loop's request is in its inbox
        del loop  # unclosed: its reader holds the inbox, which holds the future, which holds the loop
        gc.collect()
    assert loop_reference() is None and reference() is None


async def test_a_future_that_raises_when_resolved_keeps_no_other_from_resolving(api, queue, monkeypatch):
    class Refusing(asyncio.Future):
        def set_result(self, result):
            raise RuntimeError("refused")

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    loop = asyncio.get_running_loop()
    with api.stream(0) as s:
        refusing = Refusing(loop=loop)
        queue._request(s, 2, refusing, queue._inbox_of(loop))
        others = [queue.done(s) for _ in range(3)]
        testing.complete(s)
        await asyncio.wait_for(asyncio.gather(*others), 60)
    assert len(reported) == 1 and "refused" in str(reported[0].exc_value)
    refusing.cancel()


def test_an_interruption_while_a_loop_resolves_its_inbox_is_raised_after_the_others_resolve():
    from evpool import _delivery

    class Interrupted(asyncio.Future):
        def set_result(self, result):
            raise KeyboardInterrupt

    class Inbox:  # what the loop's reader takes: (future, status, error name or None)
        def __init__(self, taken):
            self.taken = taken

        def take(self):
            return self.taken

    loop = asyncio.new_event_loop()
    try:
        before, after = loop.create_future(), loop.create_future()
        with pytest.raises(KeyboardInterrupt):
            _delivery.resolve_from(Inbox([(before, 0, None), (Interrupted(loop=loop), 0, None), (after, 0, None)]))
        assert before.done() and after.done()
    finally:
        loop.close()


async def test_asyncio_futures_reach_their_loop_without_the_gil_on_the_poller(api, queue):
    with api.stream(0) as s:
        before = queue.stats()["batches_under_gil"]
        for _ in range(20):
            futures = [queue.done(s) for _ in range(5)]
            testing.complete(s)
            await asyncio.gather(*futures)
        assert queue.stats()["batches_under_gil"] == before
        after = queue.future(s)
        testing.complete(s)
        await asyncio.wrap_future(after)
        assert queue.stats()["batches_under_gil"] > before  # concurrent.futures futures need it


async def test_the_loop_resolves_futures_in_the_order_their_work_finished(api, queue):
    with api.stream(0) as s, api.stream(0) as t:
        order = []
        futures = []
        for i in range(30):
            stream = s if i % 2 == 0 else t
            future = queue.done(stream)
            future.add_done_callback(lambda f, i=i: order.append(i))
            futures.append(future)
            testing.complete(stream)
        await asyncio.gather(*futures)
    assert sorted(order) == list(range(30))
    assert [i for i in order if i % 2 == 0] == list(range(0, 30, 2))
    assert [i for i in order if i % 2 == 1] == list(range(1, 30, 2))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_fork_child_gets_exceptions_from_the_parents_queue_and_a_new_default_queue(api, queue):
    with api.stream(0) as s:
        api.default_queue()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            status = 1
            try:
                try:
                    queue.future(s)
                except RuntimeError as error:
                    status = 2 if "fork" in str(error) else 3
                else:
                    status = 4
                if status == 2:
                    try:
                        s.handle
                    except RuntimeError:
                        pass
                    else:
                        status = 5
                if status == 2:
                    with api.stream(0) as fresh:
                        future = api.default_queue().future(fresh)  # a new queue with a poller
                        testing.complete(fresh)
                        future.result(timeout=60)
                    status = 0
            finally:
                os._exit(status)
        os.close(read)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0

def test_a_callback_reads_no_pending_request_of_its_own(api, queue):
    # "0 once a thread has seen the result of every request it made": the callback is that result.
    seen = []
    with api.stream(0) as s:
        done = queue.future(s)
        queue.notify(s, lambda error: seen.append(queue.pending))
        testing.complete(s)
        done.result(timeout=60)
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            time.sleep(0.001)
    assert seen == [0]


def test_a_loop_that_has_its_future_reads_no_pending_request(api, queue):
    # The poller is held between filing the request in the inbox and waking the loop; the loop
    # takes it meanwhile: it must already be out of pending().
    loop = asyncio.new_event_loop()
    testing.hold_inbox_wakeups(0.3)
    try:
        with api.stream(0) as s:
            future = done_on(loop, queue, s)
            inbox = queue._inbox_of(loop)
            complete_and_wait_for_a_held_wakeup(s)
            taken = inbox.take()  # what the loop's reader does
            assert [item[0] for item in taken] == [future]
            assert queue.pending == 0
            future.cancel()
    finally:
        testing.hold_inbox_wakeups(0)
        loop.close()


def test_a_loop_closed_with_futures_in_its_inbox_frees_them(api, queue):
    # Not through the garbage collector, which clears weak references to what it finds unreachable
    # even if it cannot free it: the futures are freed by the close itself.
    loop = asyncio.new_event_loop()
    with api.stream(0) as s:
        reference = weakref.ref(done_on(loop, queue, s))
        after = queue.future(s)
        testing.complete(s)
        after.result(timeout=60)  # in order: the loop's request is in its inbox, not taken
        gc.disable()
        try:
            loop.close()
            assert reference() is None
        finally:
            gc.enable()


def test_an_asyncio_kind_needs_an_inbox_and_only_it_has_one(api, queue):
    loop = asyncio.new_event_loop()
    with api.stream(0) as s:
        try:
            with pytest.raises(ValueError):
                queue._request(s, 2, loop.create_future())
            with pytest.raises(ValueError):
                queue._request(s, 0, print, queue._inbox_of(loop))
        finally:
            testing.complete(s)  # what a broken check accepted finishes, so that close() returns
            loop.close()


async def test_a_cancelled_future_is_left_without_a_report(api, queue, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with api.stream(0) as s:
        done = queue.done(s)
        done.cancel()
        later = queue.done(s)
        testing.complete(s)
        await later
    assert reported == []
