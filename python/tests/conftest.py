"""pytest for evpool's Python package: the host tests drive evpool.testing (the binding code over
the C++ tests' host backends) on any machine; the tests marked ``gpu`` need a CUDA device."""

import pytest

import evpool
import evpool.testing


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if evpool.device_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def api():
    return evpool.testing.api


@pytest.fixture
def queue(api):
    """A queue of the test's own, closed at its end, after checking the queue's first promise:
    no request was finished before its own work was done (as the C++ fixture does)."""
    before = evpool.testing.early_finishes()
    with api.CompletionQueue() as queue:
        yield queue
    assert queue.pending == 0
    assert evpool.testing.early_finishes() == before
