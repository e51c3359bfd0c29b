"""How completions reach Python: the completion queue's poller hands each polling pass's finished
requests here, in one call, under one acquisition of the GIL (python/src/python_completion_queue.h).

A callback is called on the poller's thread; a concurrent.futures.Future is resolved there; an
asyncio future is resolved on its own loop: the batch's futures of one loop go to that loop in one
``call_soon_threadsafe``. A future cancelled meanwhile is left as it is, and its reference dropped:
cancelling the awaiting task leaks nothing.
"""

import sys

from ._errors import CUDAError

CALLBACK, FUTURE, ASYNCIO = 0, 1, 2  # Target in python_completion_queue.h


def _error(status, name):
    return None if name is None else CUDAError(status, name)


def _resolve_on_loop(futures):
    """Runs on the futures' loop: resolves those still waiting."""
    for future, status, name in futures:
        if future.done():  # cancelled while its work ran
            continue
        if name is None:
            future.set_result(None)
        else:
            future.set_exception(CUDAError(status, name))


def _report(what, target):
    sys.unraisablehook(_Unraisable(sys.exc_info(), what, target))


class _Unraisable:
    def __init__(self, exc_info, message, target):
        self.exc_type, self.exc_value, self.exc_traceback = exc_info
        self.err_msg = message
        self.object = target


def deliver(batch):
    """Called by the poller with [(kind, target, status, name or None), ...]."""
    loops = {}
    for kind, target, status, name in batch:
        try:
            if kind == ASYNCIO:
                loops.setdefault(target.get_loop(), []).append((target, status, name))
            elif kind == FUTURE:
                if target.set_running_or_notify_cancel():  # False: cancelled
                    if name is None:
                        target.set_result(None)
                    else:
                        target.set_exception(CUDAError(status, name))
            else:
                target(_error(status, name))
        except BaseException:  # a callback's error is its own; the others still run
            _report("Exception ignored in an evpool completion callback", target)
    for loop, futures in loops.items():
        try:
            loop.call_soon_threadsafe(_resolve_on_loop, futures)
        except RuntimeError:  # the loop is closed: nothing awaits these any more
            pass
