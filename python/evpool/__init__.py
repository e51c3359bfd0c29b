"""evpool: pooled CUDA streams and events, and GPU completions you can await.

    with evpool.stream(0) as s:          # an exclusive lease of an idle stream
        ...enqueue work on s...          # torch.cuda.ExternalStream(s.handle), cupy.cuda.ExternalStream(s.handle)
        await evpool.done(s)             # resolved on this loop, without a thread per request

docs/python.md describes the whole API.
"""

from . import _evpool
from ._api import Api as _Api
from ._errors import CUDAError

_api = _Api(_evpool)

StreamPool = _evpool.StreamPool
EventPool = _evpool.EventPool
StreamLease = _evpool.StreamLease
EventLease = _evpool.EventLease
CompletionQueue = _api.CompletionQueue

stream = _api.stream
event = _api.event
wait = _api.wait
done = _api.done
future = _api.future
notify = _api.notify
stats = _api.stats
default_queue = _api.default_queue
stream_handle = _evpool.stream_handle
device_count = _evpool.device_count

NON_BLOCKING = _evpool.NON_BLOCKING
DISABLE_TIMING = _evpool.DISABLE_TIMING
BLOCKING_SYNC = _evpool.BLOCKING_SYNC
FREE_THREADED = _evpool.FREE_THREADED

__all__ = [
    "CUDAError", "CompletionQueue", "EventLease", "EventPool", "StreamLease", "StreamPool", "default_queue",
    "device_count", "done", "event", "future", "notify", "stats", "stream", "stream_handle", "wait",
]
