"""The package's API, written once over a native module: evpool._evpool (CUDA) for users, and
evpool._testing (the C++ tests' host backends) for evpool's own tests, so that pytest runs the
code users run (python/src/bind_api.h says the same of the C++ side)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import weakref

from . import _delivery


def _queue_class(native):
    # The queues alive, whose pollers must stop taking the GIL before the interpreter finalizes: a
    # thread that takes it then is killed (with the GIL) or parked for ever (free-threaded), and
    # the poller, killed inside a noexcept function, aborts the process, or, parked, hangs the
    # thread that joins it.
    live = weakref.WeakSet()

    @atexit.register
    def stop_taking_the_gil():
        for queue in list(live):
            queue._stop_taking_the_gil()

    # Each asyncio loop's inbox (python/src/loop_inbox.h), made by the loop's first done(); the
    # loop's reader of it keeps it alive until the loop closes (a loop dropped unclosed goes with it
    # to the garbage collector). Held here weakly, so as not to outlive the loop's reader.
    inboxes = weakref.WeakKeyDictionary()  # loop -> weak reference to its inbox
    making = threading.Lock()  # the dictionary, between loops on several threads

    def inbox_of(loop):
        held = inboxes.get(loop)
        inbox = held() if held is not None else None
        if inbox is None:
            inbox = native._LoopInbox()
            try:
                loop.add_reader(inbox.fd, _delivery.resolve_from, inbox)
            except NotImplementedError:
                raise RuntimeError(
                    f"evpool: await evpool.done needs an event loop that can watch a file descriptor "
                    f"(add_reader); {type(loop).__name__} cannot") from None
            with making:
                inboxes[loop] = weakref.ref(inbox)
        return inbox

    class CompletionQueue(native.CompletionQueue):
        """Completions of work on streams, delivered to Python (docs/python.md).

        One poller thread per queue asks the GPU; callbacks run on it and concurrent.futures
        futures are resolved from it, a polling pass's completions at a time under one acquisition
        of the GIL; asyncio futures go to their loops, which resolve them, without it.
        ``spin_for`` and ``max_sleep`` (seconds) pace it as the C++ queue's options do; ``signal``
        hears completions through a memory word instead of event queries where the device can
        (CompletionSignal::kAuto). ``events`` is the EventPool its events come from. Every method is
        thread-safe.
        """

        def __init__(self, *, events=None, spin_for=50e-6, max_sleep=200e-6, signal=False):
            super().__init__(_delivery.deliver, events, spin_for, max_sleep, signal)
            live.add(self)

        def notify(self, stream, callback):
            """Calls ``callback(error)`` on the poller thread once the work enqueued on ``stream``
            so far is done; ``error`` is None, or the CUDAError the work ended with."""
            if not callable(callback):
                raise TypeError(f"evpool: notify needs a callable callback; got {type(callback).__name__}")
            self._request(stream, _delivery.CALLBACK, callback)

        def future(self, stream):
            """A concurrent.futures.Future that completes (None, or CUDAError) once the work enqueued
            on ``stream`` so far is done."""
            future = concurrent.futures.Future()
            self._request(stream, _delivery.FUTURE, future)
            return future

        def done(self, stream):
            """An asyncio future of the running loop that completes (None, or CUDAError) once the
            work enqueued on ``stream`` so far is done; resolved on that loop. Cancelling it (or
            the task awaiting it) leaves the request to finish and be dropped."""
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self._request(stream, _delivery.ASYNCIO, future, inbox_of(loop))
            return future

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

        def __repr__(self):
            state = "closed" if self.closed else f"{self.pending} pending"
            return f"<evpool.CompletionQueue {state}>"

    CompletionQueue._inbox_of = staticmethod(inbox_of)  # for the tests
    CompletionQueue.__qualname__ = "CompletionQueue"
    return CompletionQueue


class Api:
    """The functions of the package, over ``native``. Thread-safe."""

    def __init__(self, native):
        self.native = native
        self.CompletionQueue = _queue_class(native)
        self._lock = threading.Lock()
        self._queue = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget_parent_queue)

    def _forget_parent_queue(self):
        # The parent's queue has no poller in the child (it refuses every call there).
        self._lock = threading.Lock()
        self._queue = None

    def default_queue(self):
        """The process-wide completion queue, made on first use (and again in a fork child)."""
        queue = self._queue
        if queue is None:
            with self._lock:
                if self._queue is None:
                    self._queue = self.CompletionQueue()
                queue = self._queue
        return queue

    def stream(self, device=-1, pool=None):
        """An exclusive lease of an idle stream of ``device`` (-1: the current device), from
        ``pool`` or the process-wide pool; a context manager that hands the stream back on exit."""
        return (pool or self.native.StreamPool.instance()).lease(device)

    def event(self, device=-1, pool=None):
        """A lease of an event of ``device``, from ``pool`` or the process-wide pool; a context manager."""
        return (pool or self.native.EventPool.instance()).lease(device)

    def wait(self, consumer, producer, events=None):
        """Makes ``consumer`` wait for the work enqueued on ``producer`` so far, without blocking the host."""
        self.native.wait(consumer, producer, events)

    def done(self, stream, queue=None):
        """``await evpool.done(stream)``: the work enqueued on ``stream`` so far is done (None), or
        ended with an error (CUDAError raised)."""
        return (queue or self.default_queue()).done(stream)

    def future(self, stream, queue=None):
        """A concurrent.futures.Future of the work enqueued on ``stream`` so far."""
        return (queue or self.default_queue()).future(stream)

    def notify(self, stream, callback, queue=None):
        """``callback(error)`` on the poller thread once the work enqueued on ``stream`` so far is done."""
        (queue or self.default_queue()).notify(stream, callback)

    def stats(self):
        """The process-wide pools' figures and the default queue's counts."""
        return {
            "streams": self.native.StreamPool.instance().stats(),
            "events": self.native.EventPool.instance().stats(),
            "completions": self.default_queue().stats(),
        }
