"""evpool over the host backends of its C++ tests, for evpool's own tests (python/tests/): the same
API as the package (``api.stream``, ``api.done``, ...), on streams whose work completes when a test
says so (``complete``, ``fail``). Not part of evpool's API."""

from . import _testing
from ._api import Api

api = Api(_testing)

DEVICES = _testing.DEVICES
complete = _testing.complete
fail = _testing.fail
enqueued = _testing.enqueued
completed = _testing.completed
fail_records = _testing.fail_records
set_capturing = _testing.set_capturing
make_busy = _testing.make_busy
early_finishes = _testing.early_finishes
waits = _testing.waits
hold_inbox_wakeups = _testing.hold_inbox_wakeups
inbox_wakeups_held = _testing.inbox_wakeups_held
StreamPool = _testing.StreamPool
EventPool = _testing.EventPool
