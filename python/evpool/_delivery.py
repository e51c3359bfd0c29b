"""How completions reach Python: the completion queue's poller hands each polling pass's finished
requests here, in one call, under one acquisition of the GIL (python/src/python_completion_queue.h),
except asyncio futures, which it leaves in their loops' inboxes without the GIL
(python/src/loop_inbox.h): each loop's reader resolves its own (resolve_from).

A callback is called on the poller's thread; a concurrent.futures.Future is resolved there. A
future cancelled meanwhile is left as it is, and its reference dropped: cancelling the awaiting
task leaks nothing.
"""

import sys

from ._errors import CUDAError

CALLBACK, FUTURE, ASYNCIO = 0, 1, 2  # Target in python_completion_queue.h


def _error(status, name):
    return None if name is None else CUDAError(status, name)


def resolve_from(inbox):
    """The reader of a loop's inbox, on the loop: resolves the futures left there still waiting.
    One future's error is its own: reported, and the others still resolve. An interruption
    (Ctrl-C, SystemExit) raised meanwhile is raised once they have."""
    interruption = None
    for future, status, name in inbox.take():
        try:
            if future.done():  # cancelled while its work ran
                continue
            if name is None:
                future.set_result(None)
            else:
                future.set_exception(CUDAError(status, name))
        except Exception:
            _report("Exception ignored in resolving an evpool completion's future", future)
        except BaseException as raised:
            interruption = interruption or raised
    if interruption is not None:
        raise interruption


def _report(what, target):
    sys.unraisablehook(_Unraisable(sys.exc_info(), what, target))


class _Unraisable:
    def __init__(self, exc_info, message, target):
        self.exc_type, self.exc_value, self.exc_traceback = exc_info
        self.err_msg = message
        self.object = target


def deliver(batch):
    """Called by the poller with [(kind, target, status, name or None), ...]: callbacks and
    concurrent.futures futures (asyncio futures go to their loops' inboxes)."""
    for kind, target, status, name in batch:
        try:
            if kind == FUTURE:
                if target.set_running_or_notify_cancel():  # False: cancelled
                    if name is None:
                        target.set_result(None)
                    else:
                        target.set_exception(CUDAError(status, name))
            else:
                target(_error(status, name))
        except BaseException:  # a callback's error is its own; the others still run
            _report("Exception ignored in an evpool completion callback", target)
